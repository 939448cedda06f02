"""Counting distinct approvers against a requirement: groups, order, and words."""

from __future__ import annotations

import pytest

from node.policy.approvers import Approver, parse_requirement, progress, would_count
from node.policy.budgets import parse_budget


def who(name, *groups):
    return Approver(name, frozenset(groups))


def test_the_order_approvals_come_in_does_not_matter():
    slots = parse_requirement("1, 1 from finance")
    finance_first = progress(slots, [who("fay", "finance")])
    assert finance_first.text == "1 of 2, waiting for 1 more approver"
    assert progress(slots, [who("ops")]).text == "1 of 2, waiting for finance"
    both = progress(slots, [who("fay", "finance"), who("ops")])
    assert both.complete and both.approved_by == ["fay", "ops"]
    assert progress(slots, [who("ops"), who("fay", "finance")]).complete


def test_one_person_fills_one_seat_whatever_groups_they_are_in():
    slots = parse_requirement("1 from ops, 1 from finance")
    both_groups = who("pat", "ops", "finance")
    assert progress(slots, [both_groups]).text in (
        "1 of 2, waiting for finance",
        "1 of 2, waiting for ops",
    )
    # a second approver in ops moves pat to the finance seat: both count
    assert would_count(slots, [both_groups], who("oli", "ops"))
    assert progress(slots, [both_groups, who("oli", "ops")]).complete
    # one who fits no open seat would not bring it nearer
    assert not would_count(slots, [who("oli", "ops")], who("ola", "ops"))


def test_requirements_and_budgets_are_read_or_refused_saying_why():
    assert progress(parse_requirement("3 from finance"), []).text == (
        "0 of 3, waiting for 3 from finance"
    )
    for text in ("", "two", "0", "1 form finance", "11"):
        with pytest.raises(ValueError):
            parse_requirement(text)
    budget = parse_budget("payment.amount 250.5 per 12h")
    assert (budget.field, str(budget.limit), budget.period_secs) == (
        "payment.amount",
        "250.5",
        43200,
    )
    assert budget.amount_of({"payment": {"amount": 3}}) == 3
    assert budget.amount_of({"payment": {"amount": True}}) is None
    assert budget.amount_of({"payment": "3"}) is None
    for text in ("amount per day", "amount 5 per fortnight", "amount 5 per 400d", "5 per day"):
        with pytest.raises(ValueError):
            parse_budget(text)
