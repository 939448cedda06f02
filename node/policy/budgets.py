"""Budgets: a permit bounded by a running total, `@budget("amount 100 per day")` on a permit
policy. The total is the sum of the request field `amount` over what that policy permitted in
the last day (a rolling window), read from a ledger the journal folds into
(projections/ledger.py); past the limit the request asks people instead.

A budget is data, the same for every budget of the node (a policy's here, inference budgets of
tokens or cost elsewhere): what it counts (`field`, the unit), its `limit`, its window
(`period_secs`, rolling: minute, hour, day, week, month = 30 days, or a count and a unit) and
its `scope`, who shares it:

  for agent          each agent its own total (the default: `@budget("amount 100 per day")`)
  for group NAME     one total for the agents `[agent_groups] NAME` lists; an agent outside
                     the group is not within the budget (its request asks people)
  for node           one total for every agent of this node

Concurrent requests: the check and the charge happen on the event loop with nothing awaited in
between, and a charge counts from that moment (`InFlight`) until the read model holds its
`approval.decided` (journaled in the same write as the request), so no two requests can both
slip under the limit, however many arrive together, whichever agents they come from.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any, NamedTuple

PERIODS = {
    "minute": 60,
    "hour": 3600,
    "day": 86_400,
    "week": 7 * 86_400,
    "month": 30 * 86_400,
}
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}
_BUDGET = re.compile(
    r"^\s*([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\s+"
    r"([0-9]{1,18}(?:\.[0-9]{1,4})?)\s+per\s+([a-z0-9]+)"
    r"(?:\s+for\s+(agent|node|group\s+[A-Za-z0-9_.-]{1,64}))?\s*$"
)
MAX_PERIOD_SECS = 366 * 86_400


class Scope(NamedTuple):
    """Who shares a budget: "agent" (each its own), "group" (`name`, of [agent_groups]) or
    "node" (every agent of this node)."""

    kind: str = "agent"
    name: str = ""

    def ledger(self, node: str) -> str:
        """The charge's `scope` (projections/ledger.py): "" for an agent's own budget."""
        if self.kind == "group":
            return f"group:{self.name}"
        if self.kind == "node":
            return f"node:{node}"
        return ""

    def covers(self, agent: str, groups: Mapping[str, Sequence[str]]) -> bool:
        """Whether `agent` spends from this budget at all."""
        return self.kind != "group" or agent in groups.get(self.name, ())

    @property
    def text(self) -> str:
        return f"group {self.name}" if self.kind == "group" else self.kind


AGENT = Scope()


class Budget(NamedTuple):
    """`limit` of the request's `field` (a dotted path: the unit) per `period_secs`, rolling,
    shared as `scope` says."""

    field: str
    limit: Decimal
    period_secs: int
    text: str  # as the policy wrote it
    scope: Scope = AGENT

    def amount_of(self, request: Any) -> Decimal | None:
        """The field's value in a parsed request, exactly; None when absent or not a number."""
        value = request
        for part in self.field.split("."):
            if not isinstance(value, dict) or part not in value:
                return None
            value = value[part]
        return exact_amount(value)


def exact_amount(value: Any) -> Decimal | None:
    """A JSON number (or a numeric string) as a Decimal; None for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        return None
    return amount if amount.is_finite() else None


def period_seconds(text: str) -> int:
    """`day`, `hour`, `week`, `month` (30 days), `minute`, or a count and a unit (`30d`,
    `12h`, `90m`)."""
    if text in PERIODS:
        return PERIODS[text]
    match = re.fullmatch(r"([0-9]{1,6})([smhdw])", text)
    if match is None:
        raise ValueError(
            f"period {text[:40]!r}: use minute, hour, day, week, month or a count and unit "
            "(30d, 12h)"
        )
    seconds = int(match.group(1)) * _UNITS[match.group(2)]
    if not 0 < seconds <= MAX_PERIOD_SECS:
        raise ValueError(f"period {text!r}: between 1 s and 366 days")
    return seconds


def parse_budget(text: str) -> Budget:
    """`"amount 100 per day"` (or `... for group payers`, `... for node`) as a Budget;
    ValueError saying what is wrong."""
    match = _BUDGET.match(text)
    if match is None:
        raise ValueError(
            f"{text[:80]!r} is not FIELD LIMIT per PERIOD [for agent | for group NAME | for "
            "node] (say `amount 100 per day`)"
        )
    field, limit, period, scope = match.groups()
    return Budget(field, Decimal(limit), period_seconds(period), text.strip(), parse_scope(scope))


def parse_scope(text: str | None) -> Scope:
    """`agent` (or nothing), `node`, `group NAME`."""
    if not text or text == "agent":
        return AGENT
    if text == "node":
        return Scope("node")
    return Scope("group", text.split(None, 1)[1])


def amount_text(amount: Decimal) -> str:
    """An amount as the journal keeps it: plain digits, no exponent ("0.5", "120")."""
    text = format(amount.normalize(), "f")
    return text


BudgetKey = tuple[str, str, str]  # (agent or shared scope, capability, policy id)


class InFlight:
    """Charges decided but not yet delivered to the node's readers, summed per budget.

    A charge is settled by the commit listener that sees its write (`settle`), which runs on
    the event loop before the store's delivered position (`EventStore.last_position`) moves
    past it: so at any moment a charge is counted either here or in the read model up to that
    position (`Approvals.spent`), never in both and never in neither.
    """

    def __init__(self) -> None:
        self._sums: dict[BudgetKey, Decimal] = {}
        self._by_id: dict[str, list[tuple[BudgetKey, Decimal]]] = {}

    def __bool__(self) -> bool:
        return bool(self._by_id)

    def of(self, key: BudgetKey) -> Decimal:
        return self._sums.get(key, Decimal(0))

    def add(self, approval_id: str, key: BudgetKey, amount: Decimal) -> None:
        self._by_id.setdefault(approval_id, []).append((key, amount))
        self._sums[key] = self.of(key) + amount

    def settle(self, approval_id: str) -> None:
        """The charges of that request are delivered, or will never be (its write failed)."""
        for key, amount in self._by_id.pop(approval_id, ()):
            left = self._sums[key] - amount
            if left:
                self._sums[key] = left
            else:
                del self._sums[key]
