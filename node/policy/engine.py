"""One request through the policy set: permit, forbid (with the policy's reason) or ask people.

Cedar answers Allow or Deny; the gate needs three outcomes, read from which policies applied:

  a forbid applied                          forbid, with its @reason
  permits applied, one with @ask/@approvers ask, as many people as the strictest one needs
  permits applied, none asking              permit, within every @budget among them
  nothing applied                           ask (one person): the policies leave it to people

Anything the policies cannot judge asks people too, saying why: a request that does not fit
its capability's declared fields, a capability the schema does not know, a policy that errs at
evaluation (Cedar skips it, and a skipped forbid must not turn into a permit).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from functools import cache
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from node.policy.approvers import describe, stricter
from node.policy.budgets import Budget, amount_text
from node.policy.policyset import PolicySet
from node.policy.rules import Rule
from node.policy.schema import (
    AGENT_TYPE,
    CAPABILITY_TYPE,
    RequestMismatch,
    request_context,
    time_context,
)
from projections import catalogue as c
from projections.catalogue import ApproverSlot

Outcome = Literal["permit", "forbid", "ask"]
if TYPE_CHECKING:  # imported when a policy is first evaluated: the CLI's client starts faster
    import cedarpy


@cache
def _no_entities() -> cedarpy.Entities:
    import cedarpy

    return cedarpy.Entities.from_json_str("[]")


class TaskFacts(NamedTuple):
    """The task whose run asked: its id, and who created it (a token, or an agent)."""

    id: str
    caller: str | None = None
    from_agent: str | None = None


@dataclass(frozen=True)
class Ruling:
    outcome: Outcome
    ids: tuple[str, ...] = ()  # the policies that decided or asked (@id)
    reason: str | None = None
    approvers: tuple[ApproverSlot, ...] = ()  # when it asks: who must approve (() = anyone)
    budgets: tuple[Rule, ...] = ()  # when it permits: the budgets that bound it
    request: Any = None  # the parsed request (what a budget sums)


def evaluate(
    policies: PolicySet,
    agent: str,
    capability: str,
    request: str,
    now: datetime,
    task: TaskFacts | None = None,
) -> Ruling:
    """The policy set's ruling on one request, asked at `now`."""
    try:
        parsed = json.loads(request)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
        return Ruling("ask", reason="the request is not JSON, which policies cannot read")
    if capability not in policies.actions:
        return Ruling(
            "ask",
            reason=f"no policy can read {capability} requests: declare its fields in "
            f"[policy.requests.{capability}]",
        )
    try:
        fields = request_context(capability, parsed, policies.types.get(capability))
    except RequestMismatch as exc:
        return Ruling("ask", reason=f"the policies cannot judge this request: {exc}")
    context: dict[str, Any] = {"request": fields, "time": time_context(now, policies.zone)}
    if task is not None:
        context["task"] = _task(task)
    import cedarpy

    answer = cedarpy.is_authorized(
        {
            "principal": {"type": AGENT_TYPE, "id": agent},
            "action": {"type": "Action", "id": capability},
            "resource": {"type": CAPABILITY_TYPE, "id": capability},
            "context": context,
        },
        policies.cedar,
        _no_entities(),
        schema=None,
    )
    return _ruling(policies, answer, capability, parsed)


def _task(task: TaskFacts) -> dict[str, str]:
    facts = {"id": task.id}
    if task.caller is not None:
        facts["caller"] = task.caller
    if task.from_agent is not None:
        facts["from"] = task.from_agent
    return facts


def _ruling(
    policies: PolicySet, answer: cedarpy.AuthzResult, capability: str, parsed: Any
) -> Ruling:
    diagnostics = answer.diagnostics
    if diagnostics.errors:
        return Ruling(
            "ask", reason=f"a policy could not be evaluated: {diagnostics.errors[0][:300]}"
        )
    applied = [policies.rules[i] for i in diagnostics.reasons if i in policies.rules]
    forbids = [r for r in applied if r.effect == "forbid"]
    if forbids:
        first = forbids[0]
        return Ruling(
            "forbid",
            tuple(r.id for r in forbids),
            first.reason or f"forbidden by policy {first.id}",
        )
    asking = [r for r in applied if r.asks]
    if asking:
        strictest = asking[0]
        for rule in asking[1:]:
            if stricter(rule.approvers, strictest.approvers):
                strictest = rule
        why = strictest.reason or f"policy {strictest.id} asks {describe(strictest.approvers)}"
        return Ruling("ask", tuple(r.id for r in asking), why, strictest.approvers)
    if applied:
        budgets = tuple(r for r in applied if r.budget is not None)
        return Ruling("permit", tuple(r.id for r in applied), budgets=budgets, request=parsed)
    return Ruling("ask", reason=f"no policy decides this {capability} request")


def within_budgets(
    ruling: Ruling,
    spent: Callable[[str, Budget, str], Decimal],
    agent: str = "",
    groups: Mapping[str, Sequence[str]] | None = None,
    node: str = "",
) -> list[c.BudgetCharge] | Ruling:
    """A permit's charges to each of its budgets, given what each has `spent` (policy id,
    budget, ledger scope → the running total in its window: the agent's own, or shared by the
    budget's group or node); an ask, saying why, when one has no room or does not cover
    `agent` (a group budget of a group it is not in)."""
    charges: list[c.BudgetCharge] = []
    if len(ruling.budgets) > c.MAX_POLICY_IDS:  # more than a decision can journal
        return Ruling("ask", ruling.ids, "more budgets apply than one decision can carry")
    for rule in ruling.budgets:
        budget = rule.budget
        assert budget is not None
        if not budget.scope.covers(agent, groups or {}):
            why = (
                f"policy {rule.id} permits within the budget of {budget.scope.text}, which "
                f"{agent or 'this agent'} is not in ([agent_groups] {budget.scope.name})"
            )
            return Ruling("ask", (rule.id,), why)
        amount = budget.amount_of(ruling.request)
        if amount is None or amount < 0:
            why = (
                f"policy {rule.id} permits within a budget of {budget.field}, which this "
                "request does not give as a number of at least 0"
            )
            return Ruling("ask", (rule.id,), why)
        scope = budget.scope.ledger(node)
        before = spent(rule.id, budget, scope)
        if before + amount > budget.limit:
            shared = f", shared by {budget.scope.text}" if scope else ""
            why = (
                f"over the budget of policy {rule.id} ({budget.text}{shared}): "
                f"{amount_text(before)} spent, {amount_text(amount)} more would pass "
                f"{amount_text(budget.limit)}"
            )
            return Ruling("ask", (rule.id,), why)
        charges.append(
            c.BudgetCharge(
                budget=rule.id,
                field=budget.field,
                amount=amount_text(amount),
                total=amount_text(before + amount),
                limit=amount_text(budget.limit),
                period_secs=budget.period_secs,
                scope=scope,
            )
        )
    return charges
