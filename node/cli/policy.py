"""`agent-node policy test`: what a policy set would have decided on the journal's past approval
requests, against what was decided, before it decides anything.

Every `approval.requested` in the journals (since `--since`) is judged by the set as the gate
would have judged it then: the request's own fields, its agent, its task and the time it was
asked, budgets counted over the replayed history in order. Each is shown beside how it ended:
approved or denied by whom, timed out, abandoned, still pending. The rows where the set would
have done otherwise than people (a permit of what was not approved, a forbid of what was) come
first; `--all` lists every row. Reads the journal as `audit verify` does, next to a running node.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from node.cli.node_api import table
from node.display.humanize import visible, visible_lines

if TYPE_CHECKING:  # the journal, the catalogue, policies load in the functions (CLI start-up time)
    from eventstore.envelope import Envelope
    from eventstore.store import EventStore
    from node.config.model import Config
    from node.policy.budgets import Budget
    from node.policy.engine import TaskFacts
    from node.policy.policyset import PolicySet
    from projections import catalogue as c

_SINCE = re.compile(r"^([0-9]{1,6})([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}
SUMMARY_WIDTH = 80


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `policy test` to the CLI's subcommands."""
    policy = sub.add_parser("policy", help="try approval policies on past requests")
    actions = policy.add_subparsers(metavar="ACTION")
    test = actions.add_parser(
        "test",
        help="what a policy set would have decided on the journal's past approval requests",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    test.add_argument("--config", default="runtime.toml", help="path of runtime.toml")
    test.add_argument("--since", help="only requests this recent: 30d, 12h, 90m, 2w")
    test.add_argument(
        "--policy",
        action="append",
        metavar="FILE",
        help="try these Cedar files instead of the config's [policy] files (repeatable)",
    )
    test.add_argument("--agent", help="only this agent's requests")
    test.add_argument("--all", action="store_true", help="list every request, not only changes")
    test.add_argument("--json", action="store_true", help="every row and the counts, as JSON")
    test.set_defaults(func=cmd_policy_test)


@dataclass
class Row:
    """One past request: what the set would do, and what happened."""

    id: str
    agent: str
    capability: str
    at: str
    request: str
    would: str  # permit, forbid, ask
    policies: list[str]
    why: str | None
    actual: str = "pending"  # approve, deny, timeout, abandoned, pending
    by: str | None = None
    charges: list[dict[str, Any]] = field(default_factory=list)

    @property
    def differs(self) -> bool:
        """The set would have done what people did not: permitted what they did not approve,
        or forbidden what they approved."""
        return (self.would == "permit" and self.actual in ("deny", "timeout", "abandoned")) or (
            self.would == "forbid" and self.actual == "approve"
        )


def cmd_policy_test(args: argparse.Namespace) -> int:
    from node.config.load import load_config
    from node.policy.policyset import PolicyError, load_policy_set

    config = load_config(args.config)
    if args.policy:
        config.policy.files = [str(Path(p).resolve()) for p in args.policy]
    try:
        policies = load_policy_set(config, args.config)
    except PolicyError as exc:
        for problem in exc.problems:
            print(visible(problem), file=sys.stderr)
        return 2
    since = _since(args.since) if args.since else None
    store = _open_journal(config)
    try:
        shared = _Ledger(config.agent_groups, config.node.name)
        rows = list(replay(store, policies, since, args.agent, shared))
    finally:
        store.close_sync()
    counts = _counts(rows)
    if args.json:
        print(json.dumps({"policy_set": policies.digest, "counts": counts, "rows": _dicts(rows)}))
        return 0
    print(visible_lines(_report(rows, counts, policies, since, args.all)))
    return 0


def _since(text: str) -> datetime:
    match = _SINCE.match(text)
    if match is None:
        raise SystemExit(f"agent-node: --since takes a count and a unit (30d, 12h), got {text!r}")
    seconds = int(match.group(1)) * _UNITS[match.group(2)]
    return datetime.now(UTC) - timedelta(seconds=seconds)


def _open_journal(config: Config) -> EventStore:
    """The journal alone, read as `audit verify` reads it (no read model is touched)."""
    from eventstore.keys import load_or_create_key
    from eventstore.store import EventStore
    from node.app import JOURNAL_DIR
    from node.ops.filemodes import make_private

    make_private(config.data_path)
    key = load_or_create_key(config.data_path)
    path = config.data_path / JOURNAL_DIR
    return EventStore(path, key, config.node.name, map_size=config.node.map_size_mb << 20)


class _Ledger:
    """The budgets' charges as the replayed history builds them, per (agent or shared scope,
    capability, policy): (time, amount), the oldest dropped once out of every window; with
    the config's agent groups and node name, which shared budgets need."""

    def __init__(self, groups: dict[str, list[str]] | None = None, node: str = "") -> None:
        self._charges: dict[tuple[str, str, str], deque[tuple[datetime, Decimal]]] = {}
        self.groups = groups or {}
        self.node = node

    def spent(self, key: tuple[str, str, str], budget: Budget, at: datetime) -> Decimal:
        charges = self._charges.get(key, deque())
        start = at - timedelta(seconds=budget.period_secs)
        return sum((amount for when, amount in charges if when > start), Decimal(0))

    def charge(self, key: tuple[str, str, str], at: datetime, amount: Decimal) -> None:
        charges = self._charges.setdefault(key, deque())
        charges.append((at, amount))
        while charges and charges[0][0] < at - timedelta(days=366):
            charges.popleft()


def replay(
    store: EventStore,
    policies: PolicySet,
    since: datetime | None,
    agent: str | None,
    ledger: _Ledger | None = None,
) -> Iterator[Row]:
    """Every past request (of `agent`, since `since`) with the set's ruling and its ending,
    in journal order."""
    from node.services.approval_policy import task_facts
    from projections import catalogue as c

    tasks: dict[str, TaskFacts] = {}
    rows: dict[str, Row] = {}
    ledger = ledger or _Ledger()
    for chunk in store.iter_chunks():
        for envelope in chunk:
            payload = c.payload_of(envelope)
            if isinstance(payload, c.TaskCreated):
                tasks[payload.id] = task_facts(payload.id, payload.caller, payload.from_)
            elif isinstance(payload, c.ApprovalRequested):
                row = _judge(envelope, payload, policies, tasks, ledger, since, agent)
                if row is not None and payload.id not in rows:
                    rows[payload.id] = row
            else:
                _ended(rows, envelope, payload)
    yield from rows.values()


def _judge(
    envelope: Envelope,
    asked: c.ApprovalRequested,
    policies: PolicySet,
    tasks: dict[str, TaskFacts],
    ledger: _Ledger,
    since: datetime | None,
    agent: str | None,
) -> Row | None:
    from node.display.request_summary import summary
    from node.policy.approvers import describe
    from node.policy.engine import Ruling, TaskFacts, evaluate, within_budgets
    from projections import catalogue as c

    at = c.parse_ts(envelope.event.ts)
    if at is None or (since is not None and at < since) or (agent and envelope.stream != agent):
        return None
    who, capability = envelope.stream, asked.capability
    task = tasks.get(asked.task) if asked.task else None
    if asked.task and task is None:
        task = TaskFacts(asked.task)
    ruling = evaluate(policies, who, capability, asked.request, at, task)
    charges: list[c.BudgetCharge] = []
    if ruling.outcome == "permit":

        def spent(policy_id: str, budget: Budget, scope: str) -> Decimal:
            return ledger.spent((scope or who, capability, policy_id), budget, at)

        bounded = within_budgets(ruling, spent, who, ledger.groups, ledger.node)
        if isinstance(bounded, Ruling):
            ruling = bounded
        else:
            charges = bounded
            for charge in charges:
                key = (charge.scope or who, capability, charge.budget)
                ledger.charge(key, at, Decimal(charge.amount))
    why = ruling.reason
    needed = describe(ruling.approvers) if ruling.outcome == "ask" and ruling.approvers else ""
    if needed and needed not in (why or ""):  # a policy's own @reason: say whom it asks too
        why = f"{why} (asks {needed})"
    return Row(
        id=asked.id,
        agent=who,
        capability=capability,
        at=envelope.event.ts,
        request=summary(capability, asked.request or asked.detail, SUMMARY_WIDTH),
        would=ruling.outcome,
        policies=list(ruling.ids),
        why=why,
        charges=[_charge(ch) for ch in charges],
    )


def _charge(charge: c.BudgetCharge) -> dict[str, Any]:
    return {"budget": charge.budget, "amount": charge.amount, "total": charge.total}


def _ended(rows: dict[str, Row], envelope: Envelope, payload: c.Payload | None) -> None:
    """How a request ended: its first resolution in its own journal (as the read model
    reads it); a decision recorded for later is not one yet."""
    from projections import catalogue as c

    if not isinstance(payload, c.ApprovalDecided | c.ApprovalTimedOut | c.ApprovalAbandoned):
        return
    row = rows.get(payload.id)
    if row is None or row.actual != "pending" or row.agent != envelope.stream:
        return
    if isinstance(payload, c.ApprovalDecided) and not payload.later:
        row.actual = payload.decision
        row.by = ", ".join(payload.approvers) if payload.approvers else payload.operator
    elif isinstance(payload, c.ApprovalTimedOut):
        row.actual = "timeout"
    elif isinstance(payload, c.ApprovalAbandoned):
        row.actual = "abandoned"


ENDINGS = ("approve", "deny", "timeout", "abandoned", "pending")


def _counts(rows: list[Row]) -> dict[str, Any]:
    matrix = {would: dict.fromkeys(ENDINGS, 0) for would in ("permit", "forbid", "ask")}
    for row in rows:
        matrix[row.would][row.actual] += 1
    return {"requests": len(rows), "differ": sum(r.differs for r in rows), "would": matrix}


def _dicts(rows: list[Row]) -> list[dict[str, Any]]:
    return [{**asdict(row), "differs": row.differs} for row in rows]


COLUMNS = [
    ("at", "at"),
    ("agent", "agent"),
    ("request", "request"),
    ("would", "would_text"),
    ("was", "was"),
    ("id", "id"),
]


def _report(
    rows: list[Row],
    counts: dict[str, Any],
    policies: PolicySet,
    since: datetime | None,
    every: bool,
) -> str:
    window = f"since {since.isoformat(timespec='seconds')}" if since else "in the whole journal"
    lines = [
        f"policy set {policies.digest} ({len(policies.rules)} policies): "
        f"{counts['requests']} approval request(s) {window}",
        "",
        table(
            (
                {"would": f"would {would}", **{e: ended[e] for e in ENDINGS}}
                for would, ended in counts["would"].items()
            ),
            [("", "would"), *((e if e != "timeout" else "timed out", e) for e in ENDINGS)],
        ),
        "",
    ]
    differ = [r for r in rows if r.differs]
    lines.append(
        f"{len(differ)} would be decided otherwise than people did"
        + (" (first below)" if differ and not every else "")
    )
    shown = [*differ, *(r for r in rows if not r.differs)] if every else differ
    if shown:
        lines += ["", table((_cells(r) for r in shown), COLUMNS)]
    return "\n".join(lines)


def _cells(row: Row) -> dict[str, str]:
    """`would permit (small-payments)`, `would forbid (office-hours): why`, `ask: why`; `was`
    how it ended and by whom; a row that differs is marked `≠`."""
    would = row.would + (f" ({', '.join(row.policies)})" if row.policies else "")
    if row.why and row.would != "permit":
        would += f": {row.why}"
    return {
        "at": row.at[:19].replace("T", " "),
        "agent": row.agent,
        "request": row.request,
        "would_text": ("≠ " if row.differs else "") + would,
        "was": row.actual + (f" by {row.by}" if row.by else ""),
        "id": row.id,
    }
