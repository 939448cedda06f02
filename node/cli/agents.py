"""`agent-node agents list|show|deploy|upgrade|rollback|stop|start|rm|move`: agents on a node.

Calls /api/v1/agents with an admin token (list and show need `read`). `deploy` takes a
registry reference (publish the component first) and the agent's permissions (a PUT: the whole
definition); `upgrade` sends a JSON merge patch (PATCH) of only what is given, so `agents upgrade
worker registry:worker@2.0.0` keeps its capabilities, limits and approval rules. `--gate NAME`
gives the agent the capability and puts every use of it behind an approval, as in `agent test`.
"""

from __future__ import annotations

import argparse
import re
import time
from typing import Any

from node.cli.node_api import ClientError, Node, emit, segment, table
from node.cli.placed import placement_lines, runs_on, stopped_text
from node.cli.progress import say, while_waiting
from node.display.humanize import (
    visible,  # what agents and clients wrote, on one line, shown as it is
)

# an upgrade drains the old instance (up to 30 s) and waits for the new one's first tick
LIFECYCLE_TIMEOUT_SECS = 300.0  # a compile check, a standby, a first run
POLL_SECS = 1.0
PROBATION_SLACK_SECS = 120.0  # waiting for a probation: its window and this much more
HISTORY_COLUMNS = [
    ("at", "at"),
    ("event", "event"),
    ("revision", "revision"),
    ("component", "component"),
    ("operator", "operator"),
    ("reason", "reason"),
]


def _read_agent(reader: Node, name: str) -> dict[str, Any] | None:
    try:
        agent: dict[str, Any] = reader.call("GET", _path(name))
    except ClientError:
        return None  # removed meanwhile, or the node is busy: try again
    return agent


def _change_of(reader: Node, name: str) -> dict[str, Any] | None:
    """The change in progress on `name` as the node shows it: GET /api/v1/agents/{name}'s
    `change`, or, for an agent whose first deploy is still under way, its 404's."""
    try:
        agent = reader.call("GET", _path(name))
    except ClientError as exc:
        change = (exc.problem or {}).get("change")
        return change if isinstance(change, dict) else None
    return (agent or {}).get("change")


def _waiting(node: Node, name: str, method: str, path: str, **kwargs: Any) -> Any:
    """`node.call`, saying after a second (and as it changes) what the node waits for: the
    change's step as GET /api/v1/agents/{name} shows it (`change`)."""
    reader = node.another()

    def step(_: float) -> str | None:
        change = _change_of(reader, name)
        if not change:
            return None
        return f"{change['action']}: waiting for {change['step']} ({change['seconds']:.0f} s)"

    try:
        return while_waiting(lambda: node.call(method, path, **kwargs), step)
    finally:
        reader.close()


def _probation_text(rollout: dict[str, Any]) -> str:
    return (
        f"revision {rollout['revision']} on probation: {rollout['good_runs']}/"
        f"{rollout['ticks_needed']} good runs, {rollout['faults']} fault(s) "
        f"(at most {rollout['max_faults']}), {rollout['seconds']:.0f} of "
        f"{rollout['window_secs']:g} s"
    )


def _await_probation(node: Node, change: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """Follow the rollout the change started until its probation passes or rolls it back:
    (the agent as it ends, exit code: 0 passed, 1 rolled back or failed)."""
    agent = change.get("agent") or {}
    rollout = agent.get("rollout")
    if not rollout or rollout["state"] not in ("probation", "rolling_back"):
        return agent, 0
    revision = rollout["revision"]
    deadline = time.monotonic() + rollout["window_secs"] + PROBATION_SLACK_SECS
    said = ""
    while rollout["state"] in ("probation", "rolling_back"):
        text = _probation_text(rollout)
        if rollout["state"] == "rolling_back":
            text = f"revision {revision} failed its probation; rolling back: {rollout['reason']}"
        if text != said:
            say(text)
            said = text
        if time.monotonic() > deadline:
            raise ClientError(f"revision {revision}'s probation did not end in time")
        time.sleep(POLL_SECS)
        fresh = _read_agent(node, agent["name"])
        if fresh is not None:
            agent = fresh
        latest = agent.get("rollout")
        if not latest or latest["revision"] != revision:
            return agent, 0  # another change followed
        rollout = latest
    state = rollout["state"]
    if state == "passed":
        say(f"revision {revision} passed its probation ({rollout['good_runs']} good runs)")
        return agent, 0
    if state == "rolled_back":
        say(
            f"revision {revision} was rolled back automatically to revision "
            f"{rollout['rolled_back_to']}: {rollout['reason']}"
        )
        return agent, 1
    reason = f": {rollout['reason']}" if rollout.get("reason") else ""
    say(f"revision {revision}'s probation {state}{reason}")
    return agent, 1 if state == "failed" else 0


def _path(name: str, verb: str = "") -> str:
    return f"/api/v1/agents/{segment(name)}" + (f"/{verb}" if verb else "")


def _row(agent: dict[str, Any]) -> dict[str, Any]:
    current, status = agent["current"], agent["status"]
    if agent["stopped"]:
        status = "replica (stopped)" if status == "replica" else "stopped"
    return {
        "name": agent["name"],
        "source": agent["source"],
        "status": status,
        "revision": current["revision"] or "-",
        "version": current["version"] or "-",
        "component": current["component"],
        "home": runs_on(agent.get("placement")),
    }


ROW_COLUMNS = [
    ("agent", "name"),
    ("source", "source"),
    ("status", "status"),
    ("revision", "revision"),
    ("version", "version"),
    ("component", "component"),
    ("runs on", "home"),
]


def _status_text(agent: dict[str, Any]) -> str:
    if agent["status"] == "replica":  # its home is named below
        return "replica" + (f", {stopped_text(agent)}" if agent["stopped"] else "")
    return stopped_text(agent) if agent["stopped"] else agent["status"]


def _agent_text(agent: dict[str, Any]) -> str:
    current, definition = agent["current"], agent["definition"]
    status = _status_text(agent)
    if agent.get("phase") and not agent["stopped"]:
        reason = f": {agent['reason']}" if agent.get("reason") else ""
        status += f" ({agent['phase']}{reason})"
    lines = [
        f"agent: {agent['name']} ({agent['source']})",
        f"status: {status}",
        f"revision: {current['revision']}  version: {current['version'] or '-'}",
        f"component: {current['component']}  {current['sha256']}".rstrip(),
        f"capabilities: {', '.join(k for k, v in definition['capabilities'].items() if v) or '-'}",
    ]
    if agent.get("last_error"):
        lines.append(f"last error: {agent['last_error']}")
    if agent["previous"]:
        back = agent["previous"][-1]
        lines.append(f"rollback goes to: revision {back['revision']} ({back['component']})")
    lines += _rollout_lines(agent)
    # a line per line: operators' names, reasons and errors are anyone's words
    lines = [visible(line) for line in lines]
    lines += placement_lines(agent)
    history = [_history_row(entry) for entry in agent["history"]]
    if not agent.get("placement"):
        lines += ["history:", table(history, HISTORY_COLUMNS)]
    elif history:  # a placed agent's own deployments here (its stops, starts, rollbacks' whys)
        lines += ["history on this node:", table(history, HISTORY_COLUMNS)]
    return "\n".join(lines)


def _history_row(entry: dict[str, Any]) -> dict[str, Any]:
    """An automatic rollback (the node's own, after a failed first run or probation) is marked
    as such: its event reads `rolled_back (automatic)`."""
    if entry.get("automatic"):
        return {**entry, "event": f"{entry['event']} (automatic)"}
    return entry


def _rollout_lines(agent: dict[str, Any]) -> list[str]:
    lines = []
    change, rollout = agent.get("change"), agent.get("rollout")
    if change:
        lines.append(f"in progress: {change['action']}, waiting for {change['step']}")
    if rollout:
        state = rollout["state"]
        if state == "probation":
            lines.append(_probation_text(rollout))
        elif state == "rolled_back":
            lines.append(
                f"rolled back automatically: revision {rollout['revision']} failed its "
                f"probation ({rollout['reason']}); now revision {rollout['rolled_back_to']}"
            )
        else:
            reason = f": {rollout['reason']}" if rollout.get("reason") else ""
            lines.append(f"probation of revision {rollout['revision']}: {state}{reason}")
    return lines


def _change_text(change: dict[str, Any]) -> str:
    agent = change.get("agent")
    if agent is None:
        return visible(str(change["message"]))
    return visible(f"{agent['name']}: {change['message']}")


def cmd_list(node: Node, args: argparse.Namespace) -> int:
    agents = node.call("GET", "/api/v1/agents")
    emit(args, agents, lambda a: table([_row(x) for x in a], ROW_COLUMNS))
    return 0


def cmd_show(node: Node, args: argparse.Namespace) -> int:
    emit(args, node.call("GET", _path(args.name)), _agent_text)
    return 0


def _existing(node: Node, name: str) -> dict[str, Any] | None:
    agents = node.call("GET", "/api/v1/agents")
    return next((a for a in agents if a["name"] == name), None)


def _body(args: argparse.Namespace, base: dict[str, Any] | None) -> dict[str, Any]:
    """The PUT body: the current definition (upgrade) or defaults, with the options given."""
    body: dict[str, Any] = {}
    if base is not None:
        limits = base["limits"]
        body = {
            "description": base["description"],
            "mcp": base["mcp"],
            "capabilities": dict(base["capabilities"]),
            "approval": dict(base["approval"]),
            "grant_domains": list(base["grant_domains"]),
            "allow_hosts": list(base["allow_hosts"]),
            **limits,
        }
    if args.component is not None:  # an upgrade may change only other keys
        body["component"] = args.component
    if args.placement is not None:
        body["placement"] = args.placement
    for option, key in (
        ("tick_interval_ms", "tick_interval_ms"),
        ("fuel_per_tick", "fuel_per_tick"),
        ("memory_limit_mb", "memory_limit_mb"),
        ("tick_timeout_ms", "tick_timeout_ms"),
        ("description", "description"),
    ):
        if getattr(args, option) is not None:
            body[key] = getattr(args, option)
    if args.mcp is not None:
        body["mcp"] = args.mcp
    capabilities = body.setdefault("capabilities", {})
    approval = body.setdefault("approval", {})
    for capability in args.capability or ():
        capabilities[capability] = True
    for capability in args.drop_capability or ():
        capabilities.pop(capability, None)
        approval.pop(capability, None)
    for capability in args.gate or ():  # a gated capability is one the agent has
        capabilities[capability] = True
        approval[capability] = True
    if args.approval_timeout_secs is not None:
        approval["timeout_secs"] = args.approval_timeout_secs
    for domain in args.grant or ():
        body.setdefault("grant_domains", []).append(domain)
    for host in args.allow_host or ():
        body.setdefault("allow_hosts", []).append(host)
    return body


def _patch(args: argparse.Namespace, current: dict[str, Any]) -> dict[str, Any]:
    """The PATCH body (RFC 7396): the keys the options change; `null` drops an entry."""
    before = _body(argparse.Namespace(**dict.fromkeys(vars(args))), current)
    after = _body(args, current)
    patch = {key: value for key, value in after.items() if before.get(key) != value}
    for key in ("capabilities", "approval"):  # objects merge entry by entry
        if key in patch:
            old = before[key]
            patch[key] = {k: v for k, v in after[key].items() if old.get(k) != v}
            patch[key] |= {k: None for k in old if k not in after[key]}
    return patch


# the PUT keys the options set, as the node's messages name them (`approval.spend`, ...)
FLAGS = (
    (r"approval\.timeout_secs", "--approval-timeout-secs"),
    (r"approval\.([\w.-]+)", r"--gate \1"),
    (r"capabilities\.([\w.-]+)", r"--capability \1"),
    (r"`(tick_interval_ms|fuel_per_tick|memory_limit_mb|tick_timeout_ms|description)`", None),
    (r"`?grant_domains`?", "--grant"),
    (r"`?allow_hosts`?", "--allow-host"),
    (r"(^|; )placement:", r"\1--placement:"),
)


def in_flags(detail: str) -> str:
    """The node's message about a body key, naming the option that sets it instead."""
    for pattern, flag in FLAGS:
        detail = re.sub(pattern, flag or (lambda m: "--" + m.group(1).replace("_", "-")), detail)
    return detail


def _send(node: Node, method: str, args: argparse.Namespace, body: dict[str, Any]) -> Any:
    path = _path(args.name) + ("?wait_standby=false" if args.no_wait_standby else "")
    try:
        return _waiting(node, args.name, method, path, json=body)
    except ClientError as exc:
        raise ClientError(in_flags(exc.detail), exc.exit_code) from None


def _no_standby(args: argparse.Namespace, change: dict[str, Any]) -> bool:
    """A placed agent no other node of its set is ready to take over (the node waited
    `[mesh] standby_wait_secs`): not a success, unless `--no-wait-standby` asked so."""
    standby = change.get("standby") or {}
    return bool(standby.get("of")) and not standby.get("ready") and not args.no_wait_standby


def cmd_deploy(node: Node, args: argparse.Namespace) -> int:
    if _existing(node, args.name) is not None:
        raise ClientError(f"agent {args.name!r} is deployed already; use `agents upgrade`")
    change = _send(node, "PUT", args, _body(args, None))
    emit(args, change, _change_text)
    return 1 if _no_standby(args, change) else 0


def cmd_upgrade(node: Node, args: argparse.Namespace) -> int:
    current = _existing(node, args.name)
    if current is None:
        raise ClientError(f"no agent {args.name!r} is deployed; use `agents deploy`")
    change = _send(node, "PATCH", args, _patch(args, current["definition"]))
    code = _settled(node, args, change)
    return code or (1 if _no_standby(args, change) else 0)


def _settled(node: Node, args: argparse.Namespace, change: dict[str, Any]) -> int:
    """Print the change's answer; unless `--no-wait`, follow the probation it started first
    (the agent as it ended is printed with `--json`)."""
    if args.no_wait:
        emit(args, change, _change_text)
        return 0
    if not args.json:
        emit(args, change, _change_text)
    agent, code = _await_probation(node, change)
    if args.json:
        emit(args, {"message": change["message"], "agent": agent or None}, _change_text)
    return code


def _verb(method: str, verb: str) -> Any:
    def command(node: Node, args: argparse.Namespace) -> int:
        kwargs: dict[str, Any] = {}
        if verb == "rollback" and args.reason:
            kwargs["json"] = {"reason": args.reason}
        change = _waiting(node, args.name, method, _path(args.name, verb), **kwargs)
        if verb == "rollback":
            return _settled(node, args, change)
        emit(args, change, _change_text)
        return 0

    return command


def cmd_move(node: Node, args: argparse.Namespace) -> int:
    """Ask the agent's home to hand it over to `--to`."""
    body = {"to": args.to}

    def step(seconds: float) -> str:
        return (
            f"move: waiting for the home to drain {args.name} (its run in progress ends), "
            f"journal the handoff to {args.to} and the mesh's stream to hold it ({seconds:.0f} s)"
        )

    moved = while_waiting(lambda: node.call("POST", _path(args.name, "move"), json=body), step)
    emit(
        args,
        moved,
        lambda m: visible(
            f"{m['agent']}: handed over to {m['to']} (epoch {m['epoch']}, "
            f"handoff at seq {m['handoff_seq']}); drained in {m['drained_in_s']:.1f} s"
        ),
    )
    return 0


def cmd_drain(node: Node, args: argparse.Namespace) -> int:
    """Ask the node to hand every placed agent it runs to another node of its set."""

    def step(seconds: float) -> str:
        return (
            "drain: waiting for each placed agent's handoff to another node of its set "
            f"({seconds:.0f} s)"
        )

    query = f"?within_s={args.within}" if args.within is not None else ""
    drained = while_waiting(lambda: node.call("POST", f"/api/v1/node/drain{query}"), step)

    def text(body: dict[str, Any]) -> str:
        rows = body["agents"]
        if not rows:
            return "no placed agent runs on this node"
        lines = []
        for row in rows:
            if row["done"] == "moved":
                line = f"{row['agent']}: handed over to {row['to']} (epoch {row['epoch']})"
            else:
                why = f" ({row['why']})" if row.get("why") else ""
                line = (
                    f"{row['agent']}: no node could take it now; its lease is given up for a "
                    f"node of its set to take over{why}"
                )
            lines.append(visible(line))  # names a peer wrote
        return "\n".join(lines)

    emit(args, drained, text)
    return 0


def add_agents_commands(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], command: Any
) -> None:
    """`command(parent, name, func, help, timeout)` is the client commands' registrar."""
    agents = sub.add_parser(
        "agents",
        help="deploy, upgrade, roll back, stop, start and remove agents on a running node",
        description="Agents on a running node (admin token; list and show need read).",
        epilog="the HTTP calls they make: `agent-node docs deploy`, `agent-node docs api`",
    ).add_subparsers(metavar="ACTION")
    command(agents, "list", cmd_list, "the deployed agents: source, status, revision, version")
    command(agents, "show", cmd_show, "one agent: its deployment and history").add_argument("name")
    for name, func, help in (
        ("deploy", cmd_deploy, "deploy a new agent from the registry (registry:ID@VERSION)"),
        ("upgrade", cmd_upgrade, "upgrade an agent; options not given keep their value"),
    ):
        p = command(agents, name, func, help, LIFECYCLE_TIMEOUT_SECS)
        p.add_argument("name", help="agent name")
        if name == "deploy":
            p.add_argument("component", help="registry:ID@VERSION")
        else:
            p.add_argument(
                "component", nargs="?", help="registry:ID@VERSION (default: the one it runs)"
            )
        p.add_argument(
            "--placement",
            type=node_names,
            metavar="NODE,...",
            help="the nodes that may host it, this one among them (a placed agent: NATS mesh)",
        )
        p.add_argument("--capability", action="append", metavar="NAME", help="enable it")
        p.add_argument(
            "--drop-capability", action="append", metavar="NAME", help="disable it (upgrade)"
        )
        p.add_argument(
            "--gate",
            action="append",
            metavar="NAME",
            help="enable the capability, each use needing an approval (as in `agent test`)",
        )
        p.add_argument("--approval-timeout-secs", type=int, help="approval wait")
        p.add_argument("--grant", action="append", metavar="DOMAIN", help="secrets domain")
        p.add_argument("--allow-host", action="append", metavar="HOST", help="http_fetch host")
        p.add_argument("--tick-interval-ms", type=int)
        p.add_argument("--fuel-per-tick", type=int)
        p.add_argument("--memory-limit-mb", type=int)
        p.add_argument("--tick-timeout-ms", type=int)
        p.add_argument("--description")
        p.add_argument("--mcp", action=argparse.BooleanOptionalAction, default=None)
        p.add_argument(
            "--no-wait-standby",
            action="store_true",
            help="a placed agent: do not wait for another node of its set to be ready to take "
            "it over on the new version (the answer still says how many are)",
        )
        if name == "upgrade":
            _no_wait(p)
    for name, method, verb, help in (
        ("rollback", "POST", "rollback", "roll an agent back to its previous deployment"),
        ("stop", "POST", "stop", "stop an agent (its tasks stay queued)"),
        ("start", "POST", "start", "start a stopped agent"),
        ("rm", "DELETE", "", "remove an agent deployed through the API (journal kept)"),
    ):
        p = command(agents, name, _verb(method, verb), help, LIFECYCLE_TIMEOUT_SECS)
        p.add_argument("name", help="agent name")
        if verb == "rollback":
            p.add_argument("--reason", default="", help="why, for the history")
            _no_wait(p)
    p = command(
        agents,
        "move",
        cmd_move,
        "move a placed agent to another node of its placement set (ask its home)",
        LIFECYCLE_TIMEOUT_SECS,
    )
    p.add_argument("name", help="agent name")
    p.add_argument("--to", required=True, metavar="NODE", help="the node to run it on")
    node_commands = sub.add_parser(
        "node", help="the running node as a whole", description="The running node (admin token)."
    ).add_subparsers(metavar="ACTION")
    p = command(
        node_commands,
        "drain",
        cmd_drain,
        "hand the placed agents this node runs to other nodes of their sets",
        LIFECYCLE_TIMEOUT_SECS,
    )
    p.add_argument(
        "--within",
        type=float,
        metavar="SECONDS",
        help="hand over within this long (default 20); the leases of the agents left are given up",
    )


def node_names(text: str) -> list[str]:
    """`--placement node-a,node-b`: the names, in order (the node checks them)."""
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"node names separated by commas, not {text}")
    return names


def _no_wait(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-wait",
        action="store_true",
        help="return once the new instance ran once; do not follow its probation",
    )
