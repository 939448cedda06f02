"""Approvals: a request is pending from `approval.requested` until its first resolution."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from eventstore.envelope import Envelope
from projections.approvals import (
    APPROVAL_EVENTS,
    DEFAULT_TIMEOUT_SECS,
    ApprovalRequest,
    Approvals,
    Group,
    Resolution,
    expiry_of,
)
from projections.disk import DiskModels
from projections.tasks import Tasks
from tests.projections.envelopes import Journal, envelope, fold, refolded_snapshot, ts_at


def request(
    j: Journal, agent: str, approval_id: str, capability: str = "http", **extra: Any
) -> None:
    data = {"id": approval_id, "capability": capability, "detail": f"{capability}: x", **extra}
    j.add(agent, "approval.requested", data)


def decide(j: Journal, agent: str, approval_id: str, decision: str, operator: Any = "op") -> None:
    j.add(
        agent, "approval.decided", {"id": approval_id, "decision": decision, "operator": operator}
    )


def fold_directly(approvals: Approvals, envelopes: Iterable[Envelope]) -> Approvals:
    """Into a scratch environment, past the registry's `handles` filter and the guard."""
    disk = DiskModels([approvals]).scratch()
    approvals.__dict__["_scratch"] = disk  # the environment lives as long as the model
    with disk.space_env().begin(write=True) as txn:
        for one in envelopes:
            approvals.fold(txn, one)
    return approvals


def empty_snapshot() -> dict[str, Any]:
    return fold(Approvals(), []).snapshot()


def pending_ids(approvals: Approvals) -> list[str]:
    return [r.id for r in approvals.list()]


def resolutions(approvals: Approvals) -> dict[str, Resolution]:
    return {r.id: r for r in approvals.history(1 << 30)}


def test_a_request_is_pending_with_its_timeout_and_expiry() -> None:
    j = Journal()
    request(j, "alice", "a1", "http", timeout_secs=60)
    approvals = fold(Approvals(), j.envelopes)
    expected = ApprovalRequest(
        id="a1",
        agent="alice",
        capability="http",
        detail="http: x",
        requested_at=ts_at(1),
        timeout_secs=60,
        expires_at=ts_at(61),
    )
    assert approvals.get("a1") == expected
    assert approvals.list() == [expected]
    assert approvals.count == 1
    assert approvals.is_pending("a1") and not approvals.is_resolved("a1")
    assert resolutions(approvals) == {} and approvals.resolution("a1") is None
    assert approvals.groups() == [Group("alice", "http", 1, ["a1"])]


def test_a_missing_timeout_is_the_default() -> None:
    data: dict[str, Any] = {"id": "a1", "capability": "http"}
    approvals = fold(Approvals(), [envelope("alice", 1, "approval.requested", data, position=1)])
    request = approvals.get("a1")
    assert request is not None
    assert request.timeout_secs == DEFAULT_TIMEOUT_SECS
    assert request.expires_at == ts_at(1 + DEFAULT_TIMEOUT_SECS)
    assert (request.detail, request.capability) == ("", "http")  # detail defaults to ""


@pytest.mark.parametrize("timeout", [0, -5, True, "60", 1.5])
def test_a_request_whose_timeout_is_not_a_positive_integer_is_not_folded(timeout: Any) -> None:
    """Its payload does not decode for its type (projections/catalogue.py): ignored."""
    data: dict[str, Any] = {"id": "a1", "capability": "http", "timeout_secs": timeout}
    approvals = fold(Approvals(), [envelope("alice", 1, "approval.requested", data, position=1)])
    assert approvals.get("a1") is None and approvals.count == 0


def test_expiry_keeps_the_timestamp_format_or_an_unparsable_one_as_is() -> None:
    assert expiry_of("2026-01-01T23:59:30.000000Z", 45) == "2026-01-02T00:00:15.000000Z"
    assert expiry_of("2026-01-01T00:00:00+02:00", 1) == "2026-01-01T00:00:01.000000+02:00"
    assert expiry_of("yesterday", 300) == "yesterday"
    approvals = fold(
        Approvals(),
        [envelope("a", 1, "approval.requested", {"id": "x"}, position=1, ts="yesterday")],
    )
    request = approvals.get("x")
    assert request is not None and request.expires_at == "yesterday"


@pytest.mark.parametrize(
    ("decision", "operator", "resolution"),
    [
        (
            "approve",
            "op",
            Resolution("a1", "alice", "approve", ts_at(2), "op", None, "http", "http: x"),
        ),
        ("deny", "op", Resolution("a1", "alice", "deny", ts_at(2), "op", None, "http", "http: x")),
    ],
)
def test_a_decision_resolves_the_request(
    decision: str, operator: Any, resolution: Resolution
) -> None:
    j = Journal()
    request(j, "alice", "a1")
    decide(j, "alice", "a1", decision, operator)
    approvals = fold(Approvals(), j.envelopes)
    assert approvals.get("a1") is None
    assert approvals.list() == [] and approvals.count == 0
    assert approvals.groups() == []
    assert resolutions(approvals) == {"a1": resolution}
    assert approvals.resolution("a1") == resolution and approvals.is_resolved("a1")
    assert not approvals.is_pending("a1")


def test_a_timeout_resolves_the_request_without_an_operator() -> None:
    j = Journal()
    request(j, "alice", "a1")
    j.add("alice", "approval.timed_out", {"id": "a1", "operator": "ignored"})
    approvals = fold(Approvals(), j.envelopes)
    assert approvals.list() == [] and approvals.count == 0
    assert resolutions(approvals) == {
        "a1": Resolution("a1", "alice", "timeout", ts_at(2), None, None, "http", "http: x")
    }


def test_a_decided_approval_that_then_times_out_stays_decided() -> None:
    j = Journal()
    request(j, "alice", "a1")
    decide(j, "alice", "a1", "approve")
    j.add("alice", "approval.timed_out", {"id": "a1"})
    decide(j, "alice", "a1", "deny", "other")
    approvals = fold(Approvals(), j.envelopes)
    assert approvals.resolution("a1") == Resolution(
        "a1", "alice", "approve", ts_at(2), "op", None, "http", "http: x"
    )
    assert approvals.history(10) == [approvals.resolution("a1")]  # resolved once
    assert approvals.list() == [] and approvals.count == 0


def test_a_timed_out_approval_cannot_be_decided_later() -> None:
    j = Journal()
    request(j, "alice", "a1")
    j.add("alice", "approval.timed_out", {"id": "a1"})
    decide(j, "alice", "a1", "approve")
    approvals = fold(Approvals(), j.envelopes)
    resolution = approvals.resolution("a1")
    assert resolution is not None and resolution.outcome == "timeout"


def test_an_unknown_decision_leaves_the_request_pending() -> None:
    j = Journal()
    request(j, "alice", "a1")
    decide(j, "alice", "a1", "maybe")
    j.add("alice", "approval.decided", {"id": "a1"})  # no decision at all
    approvals = fold(Approvals(), j.envelopes)
    assert pending_ids(approvals) == ["a1"]
    assert resolutions(approvals) == {}


def test_resolutions_of_unknown_ids_or_from_another_journal_are_ignored() -> None:
    j = Journal()
    request(j, "alice", "a1")
    decide(j, "alice", "nope", "approve")  # never requested
    j.add("alice", "approval.timed_out", {"id": "nope"})
    decide(j, "bob", "a1", "approve")  # alice's request, bob's journal
    j.add("bob", "approval.timed_out", {"id": "a1"})
    approvals = fold(Approvals(), j.envelopes)
    assert pending_ids(approvals) == ["a1"]
    assert resolutions(approvals) == {}
    assert approvals.resolution("nope") is None and not approvals.is_pending("nope")


def test_a_repeated_request_is_ignored_while_pending_and_after_resolution() -> None:
    j = Journal()
    request(j, "alice", "a1", "http")
    request(j, "alice", "a1", "fs")  # same id again: the first holds
    request(j, "bob", "a1", "fs")  # same id in another journal
    approvals = fold(Approvals(), j.envelopes)
    assert [(r.agent, r.capability, r.requested_at) for r in approvals.list()] == [
        ("alice", "http", ts_at(1))
    ]
    decide(j, "alice", "a1", "deny")
    request(j, "alice", "a1", "http")  # a resolved id never becomes pending again
    approvals = fold(Approvals(), j.envelopes)
    assert approvals.list() == [] and approvals.count == 0
    resolution = approvals.resolution("a1")
    assert resolution is not None and resolution.outcome == "deny"
    assert approvals.groups() == []


@pytest.mark.parametrize("data", [{}, {"id": 5}, {"id": None, "capability": "http"}])
def test_an_event_without_a_string_id_is_ignored(data: dict[str, Any]) -> None:
    approvals = fold_directly(
        Approvals(),
        [
            envelope("alice", position, kind, data, position=position)
            for position, kind in enumerate(sorted(APPROVAL_EVENTS), start=1)
        ],
    )
    assert approvals.snapshot() == empty_snapshot()


def test_other_event_types_are_not_handled_and_change_nothing() -> None:
    assert "log" not in Approvals.handles
    # even fed directly (without the registry's filter), a non-approval event is a no-op
    approvals = fold_directly(
        Approvals(),
        [
            envelope("alice", 1, "log", {"id": "a1", "capability": "x"}, position=1),
            envelope("alice", 2, "task.created", {"id": "a1"}, position=2),
        ],
    )
    assert approvals.snapshot() == empty_snapshot()


def test_groups_by_agent_and_capability_in_order_of_first_request() -> None:
    j = Journal()
    request(j, "alice", "a1", "http")
    request(j, "bob", "b1", "http")
    request(j, "alice", "a2", "fs")
    request(j, "alice", "a3", "http")
    approvals = fold(Approvals(), j.envelopes)
    assert approvals.groups() == [
        Group("alice", "http", 2, ["a1", "a3"]),
        Group("bob", "http", 1, ["b1"]),
        Group("alice", "fs", 1, ["a2"]),
    ]
    assert [r.id for r in approvals.list()] == ["a1", "b1", "a2", "a3"]  # oldest first
    decide(j, "alice", "a1", "approve")
    decide(j, "bob", "b1", "deny")
    request(j, "bob", "b2", "http")  # bob's group was emptied: it comes back last
    approvals = fold(Approvals(), j.envelopes)
    assert approvals.groups() == [
        Group("alice", "http", 1, ["a3"]),
        Group("alice", "fs", 1, ["a2"]),
        Group("bob", "http", 1, ["b2"]),
    ]


def test_snapshot_shows_pending_resolved_and_groups_and_refolds_equal() -> None:
    j = Journal()
    request(j, "alice", "a2", "http", timeout_secs=10)
    request(j, "alice", "a1", "http")
    decide(j, "alice", "a2", "approve")
    request(j, "bob", "b1", "fs")
    j.add("bob", "approval.timed_out", {"id": "b1"})
    request(j, "bob", "b2", "fs")
    approvals = fold(Approvals(), j.envelopes)
    snapshot = approvals.snapshot()
    assert [r["id"] for r in snapshot["pending"]] == ["a1", "b2"]
    assert list(snapshot["resolved"]) == ["a2", "b1"]  # sorted by id
    assert snapshot["resolved"]["b1"]["outcome"] == "timeout"
    assert snapshot["groups"] == [
        {"agent": "alice", "capability": "http", "count": 1, "ids": ["a1"]},
        {"agent": "bob", "capability": "fs", "count": 1, "ids": ["b2"]},
    ]
    assert refolded_snapshot(approvals, j.envelopes) == snapshot


def test_a_resolution_before_its_request_is_ignored() -> None:
    """Out of order (a damaged or merged journal): the decision is lost, the request waits."""
    j = Journal()
    decide(j, "alice", "a1", "approve")
    j.add("alice", "approval.timed_out", {"id": "a1"})
    request(j, "alice", "a1")
    approvals = fold(Approvals(), j.envelopes)
    assert [r.requested_at for r in approvals.list()] == [ts_at(3)]
    assert resolutions(approvals) == {}


def test_history_is_the_resolutions_newest_first_up_to_a_limit() -> None:
    j = Journal()
    for approval_id in ("a1", "a2", "a3"):
        request(j, "alice", approval_id)
    decide(j, "alice", "a2", "deny")
    j.add("alice", "approval.timed_out", {"id": "a3"})
    decide(j, "alice", "a1", "approve")
    approvals = fold(Approvals(), j.envelopes)
    assert [(r.id, r.outcome) for r in approvals.history(10)] == [
        ("a1", "approve"),
        ("a3", "timeout"),
        ("a2", "deny"),
    ]
    assert [r.id for r in approvals.history(2)] == ["a1", "a3"]
    assert approvals.history(0) == [] and approvals.history(-1) == []


def test_a_request_asked_by_a_task_is_found_by_that_task_until_resolved() -> None:
    """Tasks.asked_by: what a canceled task's approvals are (the gate denies them)."""
    j = Journal()
    request(j, "alice", "a1", task="t1")
    request(j, "alice", "a2", task="t2")
    request(j, "alice", "a3", task="t1")
    request(j, "bob", "b1", task="t1")
    assert fold(Tasks(), j.envelopes).asked_by("alice", "t1") == ["a1", "a3"]
    decide(j, "alice", "a1", "deny")
    tasks = fold(Tasks(), j.envelopes)
    assert tasks.asked_by("alice", "t1") == ["a3"]
    assert tasks.asked_by("alice", "t9") == []


def test_ids_and_capabilities_longer_than_an_lmdb_key_still_fold() -> None:
    """A 128-character id may take 512 bytes, a capability 1000 characters: stored under a
    digest, found by the same text."""
    long_id, other_id = "\U0001d538" * 128, "\U0001d538" * 127 + "\U0001d539"  # 4 bytes each
    capability = "c" * 1000
    j = Journal()
    request(j, "alice", long_id, capability)
    request(j, "alice", other_id, capability)
    decide(j, "alice", long_id, "approve")
    approvals = fold(Approvals(), j.envelopes, guarded=False)
    assert approvals.resolution(long_id) is not None and approvals.get(long_id) is None
    request_ = approvals.get(other_id)
    assert request_ is not None and request_.capability == capability
    assert approvals.groups() == [Group("alice", capability, 1, [other_id])]
    assert approvals.get("x" * 10_000) is None and approvals.resolution("x" * 10_000) is None
