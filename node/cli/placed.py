"""What the CLI says of a placed agent (docs/mesh.md, "What an operator sees and does"): where
it runs and in which epoch, the home's lease or that it is gone (`suspect`), who stopped it,
the nodes ready to take it, its moves and its deployments across homes with their operators.
`agents show|list` and `status` print it from GET /api/v1/agents' `placement`.

Operators' names are anyone's words (a hostile member's journal can hold any): every line here
goes through `visible`, every table cell through `cell` (node_api.table).
"""

from __future__ import annotations

from typing import Any

from node.cli.node_api import table
from node.display.humanize import visible

MOVE_COLUMNS = [
    ("seq", "seq"),
    ("epoch", "epoch"),
    ("from", "from"),
    ("to", "to"),
    ("reason", "reason"),
    ("at", "at"),
]
DEPLOYMENT_COLUMNS = [
    ("at", "at"),
    ("change", "change"),
    ("revision", "revision"),
    ("node", "node"),
    ("operator", "operator"),
    ("component", "component"),
]


def runs_on(placement: dict[str, Any] | None) -> str:
    """The home, for a list's column: `node-b`, `node-b (suspect)`, `-` (not placed)."""
    if not placement:
        return "-"
    home = placement.get("home") or "-"
    return f"{home} (suspect)" if placement.get("suspect") else home


def stopped_text(agent: dict[str, Any]) -> str:
    """`stopped by an operator` and, for a placed agent, who: its journal says."""
    who = (agent.get("placement") or {}).get("stopped_by")
    return f"stopped by an operator ({who})" if who else "stopped by an operator"


def where_text(placement: dict[str, Any]) -> str:
    """`runs on node-b (epoch 1)`, and why to doubt it when its home is suspect."""
    text = f"runs on {placement.get('home') or '-'} (epoch {placement.get('epoch', 0)})"
    if placement.get("suspect"):
        gone = placement.get("home_lease") is None
        text += f", suspect: its lease is {'gone' if gone else 'about to lapse'}"
    return text


def lease_text(placement: dict[str, Any]) -> str:
    """This node's lease (on the home), else the home's as the mesh has it, else gone."""
    home = placement.get("home") or "the home"
    own, theirs = placement.get("lease"), placement.get("home_lease")
    if own:
        left = own.get("expires_in")
        return f"held by {own['holder']} (this node)" + (
            f", {left:.1f} s left" if left is not None else ""
        )
    if theirs:
        text = f"{home}'s, {theirs['expires_in']:.1f} s left"
        return text + (": suspect (about to lapse)" if placement.get("suspect") else "")
    if placement.get("suspect"):
        return (
            f"gone: suspect ({home} renews it no more; a node of its set takes the agent over "
            "once the lease has lapsed)"
        )
    return "none held"


def placement_lines(agent: dict[str, Any]) -> list[str]:
    """`agents show`'s lines of a placed agent (none for one that is not)."""
    placement = agent.get("placement")
    if not placement:
        return []
    ready = placement.get("candidates") or []
    lines = [
        f"runs on: {placement.get('home') or '-'} (epoch {placement.get('epoch', 0)})"
        + (", suspect" if placement.get("suspect") else ""),
        f"lease: {lease_text(placement)}",
        f"placement: {', '.join(placement.get('placement') or [])}",
        f"ready to take it: {', '.join(ready) or 'no other node of its set now'}",
    ]
    revision = placement.get("revision")
    if revision and revision != agent["current"]["revision"]:
        lines.append(f"its journal names revision {revision}")
    lines = [visible(line) for line in lines]
    moves = placement.get("moves") or []
    if moves:  # newest first, as the console lists them
        lines += ["moves (newest first):", table(moves[::-1], MOVE_COLUMNS)]
    history = placement.get("history") or []
    if history:
        lines += [
            "deployments across homes (newest first):",
            table(history[::-1], DEPLOYMENT_COLUMNS),
        ]
    return lines


def replica_status(agent: dict[str, Any]) -> dict[str, Any]:
    """A replica's entry in `status`: no instance here (no figures), where it runs instead,
    in words (`phase`, as the status of an agent without an instance has) and as data."""
    placement = agent.get("placement") or {}
    phase = where_text(placement)
    if agent["stopped"]:
        phase += "; " + stopped_text(agent)
    return {
        "name": agent["name"],
        "status": "replica",
        "phase": phase,
        "runs_on": placement.get("home"),
        "epoch": placement.get("epoch"),
        "suspect": bool(placement.get("suspect")),
        "stopped_by": placement.get("stopped_by"),
    }
