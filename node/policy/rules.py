"""What each Cedar policy says beyond permit or forbid, in its annotations:

  @id("small-payments")          required, unique: the name decisions are journaled under
  @reason("outside office hours") why, in words: a forbid's is what the agent is told
  @ask                           on a permit: ask people (one approver) instead of permitting
  @approvers("2, 1 from finance") on a permit: ask that many distinct people (approvers.py)
  @budget("amount 100 per day")  on a permit: permit only within a running total (budgets.py)
  @description("...")            free text, kept with the policy

Any other annotation is refused, so a misspelt `@approver` cannot silently permit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from node.policy.approvers import parse_requirement
from node.policy.budgets import Budget, parse_budget
from projections.catalogue import ApproverSlot

KNOWN = ("id", "reason", "ask", "approvers", "budget", "description")
MAX_REASON = 500
MAX_ID = 128


@dataclass(frozen=True)
class Rule:
    """One policy as the gate reads it."""

    id: str
    effect: Literal["permit", "forbid"]
    actions: frozenset[str] | None  # the capabilities it is scoped to; None: any
    reason: str | None = None
    approvers: tuple[ApproverSlot, ...] = ()  # non-empty: it asks people
    budget: Budget | None = None

    @property
    def asks(self) -> bool:
        return bool(self.approvers)


def rule_of(policy: dict[str, Any]) -> Rule:
    """A policy in Cedar's JSON form as a Rule; ValueError saying which annotation is wrong."""
    annotations: dict[str, str] = policy.get("annotations") or {}
    unknown = sorted(set(annotations) - set(KNOWN))
    if unknown:
        raise ValueError(
            f"unknown annotation @{unknown[0][:40]} (known: {', '.join('@' + k for k in KNOWN)})"
        )
    policy_id = annotations.get("id", "")
    if not policy_id.strip():
        raise ValueError('every policy names itself: add @id("...") (decisions name it)')
    if len(policy_id) > MAX_ID or not policy_id.isprintable():
        raise ValueError(f"@id: one line of at most {MAX_ID} printable characters")
    effect = policy.get("effect")
    if effect not in ("permit", "forbid"):
        raise ValueError(f"effect {effect!r}")
    reason = annotations.get("reason")
    if reason is not None and not (reason.strip() and len(reason) <= MAX_REASON):
        raise ValueError(f"@reason: one line of 1 to {MAX_REASON} printable characters")
    if reason is not None and not reason.isprintable():
        raise ValueError(f"@reason: one line of 1 to {MAX_REASON} printable characters")
    approvers: tuple[ApproverSlot, ...] = ()
    if "approvers" in annotations:
        try:
            approvers = tuple(parse_requirement(annotations["approvers"]))
        except ValueError as exc:
            raise ValueError(f"@approvers: {exc}") from None
    elif "ask" in annotations:
        approvers = (ApproverSlot(count=1),)
    budget = None
    if "budget" in annotations:
        try:
            budget = parse_budget(annotations["budget"])
        except ValueError as exc:
            raise ValueError(f"@budget: {exc}") from None
    if effect == "forbid" and (approvers or budget):
        raise ValueError("@ask, @approvers and @budget belong on a permit, not a forbid")
    if approvers and budget:
        raise ValueError("@budget bounds what a policy permits: not on one that asks people")
    return Rule(policy_id, effect, _actions(policy.get("action")), reason, approvers, budget)


def _actions(scope: Any) -> frozenset[str] | None:
    """The capabilities `action == ...` or `action in [...]` names; None for any action."""
    if not isinstance(scope, dict):
        return None
    op = scope.get("op")
    if op == "==" and isinstance(scope.get("entity"), dict):
        return frozenset({str(scope["entity"].get("id"))})
    if op == "in":
        entities = scope.get("entities") or ([scope["entity"]] if "entity" in scope else [])
        return frozenset(str(e.get("id")) for e in entities if isinstance(e, dict))
    return None
