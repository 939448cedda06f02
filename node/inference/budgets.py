"""Inference budgets (`[[inference.budgets]]`), on the node's one budget mechanism
(node/policy/budgets.py's Budget and Scope, projections/ledger.py's ledger through
projections/inference_ledger.py): per agent, per named group of agents (shared) or per node,
per rolling window, in tokens or cost.

A call is judged by the most it may take (its estimated prompt and every token it may
generate, at its model's prices), so a budget is never passed: a call that could pass it is
refused (`failed`, naming the budget and what is left) or asked of people. The check and the
reservation happen on the event loop with nothing awaited in between; a reservation counts
until the call's `inference.completed` is folded (`settle`), so calls of several agents of one
group cannot both slip under a shared limit.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol

from node.config.inference import InferenceBudget
from node.inference.models import NANOS
from node.inference.notices import Crossing
from node.policy.budgets import Budget, parse_budget
from node.policy.budgets import amount_text as decimal_text


class Spent(Protocol):
    def spent(self, agents: Sequence[str], unit: str, since_micros: int) -> Decimal: ...


@dataclass(frozen=True)
class Exceeded:
    budget: Budget
    over: str  # "refuse" or "ask"
    left: Decimal  # in the budget's unit (cost: currency units)
    asked: Decimal  # what the call may take, in the same unit

    def message(self) -> str:
        unit = "" if self.budget.field == "cost" else " tokens"
        return (
            f"inference budget {self.budget.text!r}: {decimal_text(self.left)}{unit} left, "
            f"this call may take {decimal_text(self.asked)}{unit}"
        )


def _nanos_to_units(value: int | Decimal) -> Decimal:
    return Decimal(value) / NANOS


class InferenceBudgets:
    def __init__(
        self,
        rules: Sequence[InferenceBudget],
        ledger: Spent | None,
        groups: Mapping[str, Sequence[str]],
        agents: Sequence[str],
    ) -> None:
        self.rules = [(parse_budget(r.rule), r.over) for r in rules]
        self.ledger = ledger
        self.groups = groups
        self.agents = agents
        self._held: Counter[tuple[str, str]] = Counter()  # (agent, unit) -> reserved

    def members(self, budget: Budget, agent: str) -> Sequence[str] | None:
        scope = budget.scope
        if not scope.covers(agent, self.groups):
            return None
        if scope.kind == "group":
            return list(self.groups.get(scope.name, ()))
        if scope.kind == "node":
            return list({*self.agents, agent})
        return [agent]

    def used(self, budget: Budget, members: Sequence[str], now: float) -> Decimal:
        """What the members spent in the budget's window, and hold in flight (its unit)."""
        unit = budget.field
        since = int((now - budget.period_secs) * 1_000_000)
        spent = self.ledger.spent(members, unit, since) if self.ledger is not None else Decimal(0)
        held = sum((self._held[(m, unit)] for m in members), 0)
        total = spent + held
        return _nanos_to_units(total) if unit == "cost" else total

    def check(
        self, agent: str, tokens: int, cost_nanos: int, now: float | None = None
    ) -> Exceeded | None:
        """The first budget the call could pass (None: it fits every one); reserves it when it
        fits, for `settle` to release."""
        now = time.time() if now is None else now
        for budget, over in self.rules:
            members = self.members(budget, agent)
            if members is None:
                continue
            asked = Decimal(tokens) if budget.field == "tokens" else _nanos_to_units(cost_nanos)
            left = budget.limit - self.used(budget, members, now)
            if asked > left:
                return Exceeded(budget, over, max(left, Decimal(0)), asked)
        self.reserve(agent, tokens, cost_nanos)
        return None

    def reserve(self, agent: str, tokens: int, cost_nanos: int) -> None:
        self._held[(agent, "tokens")] += tokens
        self._held[(agent, "cost")] += cost_nanos

    def settle(self, agent: str, tokens: int, cost_nanos: int) -> None:
        """The reservation ends: the call's charge is folded (or it failed)."""
        for unit, amount in (("tokens", tokens), ("cost", cost_nanos)):
            self._held[(agent, unit)] = max(self._held[(agent, unit)] - amount, 0)

    def crossed(
        self, agent: str, before: dict[str, Decimal], now: float | None = None
    ) -> list[Crossing]:
        """The budgets whose use crossed 80 % or 100 % since `before` (node/inference/notices.py
        tells each once per window)."""
        now = time.time() if now is None else now
        said = []
        for budget, _ in self.rules:
            members = self.members(budget, agent)
            if members is None or not budget.limit:
                continue
            was, now_used = before.get(budget.text, Decimal(0)), self.used(budget, members, now)
            for mark in (Decimal("0.8"), Decimal(1)):
                if was < mark * budget.limit <= now_used:
                    said.append(Crossing(budget, int(mark * 100), agent, now))
        return said

    def uses(self, agent: str, now: float | None = None) -> dict[str, Decimal]:
        now = time.time() if now is None else now
        found = {}
        for budget, _ in self.rules:
            members = self.members(budget, agent)
            if members is not None:
                found[budget.text] = self.used(budget, members, now)
        return found


def shown(exceeded: Exceeded) -> dict[str, str]:
    """What an approval of a call past a budget shows besides the call."""
    return {"budget": exceeded.budget.text, "left": decimal_text(exceeded.left)}
