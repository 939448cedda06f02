"""The A2A view: per task its A2A context, cancelation, last change and pending approvals."""

from __future__ import annotations

from typing import Any

import pytest

from projections.approvals import Approvals
from projections.states import TaskState, a2a_state
from projections.tasks import Tasks
from tests.projections.envelopes import Journal, envelope, fold, refolded_snapshot, ts_at

A2A_KEYS = ("context", "canceled", "updated", "working_on", "approval_task", "waiting")
CONTEXT = {"contextId": "ctx-1", "message": {"role": "user", "parts": [{"text": "hi"}]}}


def create(j: Journal, agent: str, task_id: str, **extra: Any) -> None:
    j.add(agent, "task.created", {"id": task_id, "from": "boss", "input": {}, **extra})


def ask(j: Journal, agent: str, approval_id: str) -> None:
    j.add(agent, "approval.requested", {"id": approval_id, "capability": "http"})


def empty() -> dict[str, Any]:
    return fold(Tasks(), []).snapshot()


def test_a_created_task_keeps_its_a2a_context_and_creation_time() -> None:
    j = Journal()
    create(j, "alice", "t1", a2a=CONTEXT)
    create(j, "alice", "t2")  # no a2a data (a REST task)
    create(j, "alice", "t3", a2a="not a map")
    view = fold(Tasks(), j.envelopes)
    assert view.context_of("t1") == CONTEXT
    assert view.context_of("t2") == view.context_of("t3") == view.context_of("nope") == {}
    assert [view.updated_at(t) for t in ("t1", "t2", "t3", "nope")] == [
        ts_at(1),
        ts_at(2),
        ts_at(3),
        None,
    ]
    snapshot = view.snapshot()
    assert snapshot["context"] == {"t1": CONTEXT}
    assert snapshot["updated"] == {"t1": ts_at(1), "t2": ts_at(2), "t3": ts_at(3)}
    assert (snapshot["canceled"], snapshot["working_on"], snapshot["waiting"]) == ({}, {}, {})
    assert view.canceled_by("t1") is None and view.working_on("alice") is None


def test_a_second_create_of_an_id_changes_nothing() -> None:
    j = Journal()
    create(j, "alice", "t1", a2a=CONTEXT)
    create(j, "alice", "t1", a2a={"contextId": "other"})
    view = fold(Tasks(), j.envelopes)
    assert view.context_of("t1") == CONTEXT
    assert view.snapshot()["updated"] == {"t1": ts_at(1)}


def test_started_is_what_the_agent_works_on_and_progress_only_touches_the_time() -> None:
    j = Journal()
    create(j, "alice", "t1")
    j.add("alice", "task.started", {"id": "t1"})
    j.add("alice", "task.progress", {"id": "t1", "progress": 1})
    view = fold(Tasks(), j.envelopes)
    assert view.working_on("alice") == "t1"
    assert view.snapshot()["working_on"] == {"alice": "t1"}
    assert view.snapshot()["updated"] == {"t1": ts_at(3)}


@pytest.mark.parametrize("end", ["task.completed", "task.failed"])
def test_the_end_of_a_task_clears_what_it_waited_for(end: str) -> None:
    j = Journal()
    create(j, "alice", "t1")
    j.add("alice", "task.started", {"id": "t1"})
    ask(j, "alice", "a1")
    j.add("alice", end, {"id": "t1"})
    ask(j, "alice", "a2")  # after the task's end: nobody's
    view = fold(Tasks(), j.envelopes)
    assert view.working_on("alice") is None
    assert view.pending_approvals("t1") == []
    assert view.approval_task_of("a1") == "t1"  # the link stays: whose approval it was
    assert view.approval_task_of("a2") is None
    assert view.snapshot()["approval_task"] == {"a1": "t1"}
    assert view.snapshot()["updated"] == {"t1": ts_at(4)}


def test_the_end_of_a_task_the_agent_is_not_on_keeps_the_current_one() -> None:
    j = Journal()
    create(j, "alice", "t1")
    create(j, "alice", "t2")
    j.add("alice", "task.started", {"id": "t2"})
    j.add("alice", "task.failed", {"id": "t1", "error": "x"})
    assert fold(Tasks(), j.envelopes).snapshot()["working_on"] == {"alice": "t2"}


def test_a_restarted_delivery_moves_the_worker_to_the_task_started_last() -> None:
    j = Journal()
    create(j, "alice", "t1")
    create(j, "alice", "t2")
    j.add("alice", "task.started", {"id": "t1"})
    j.add("alice", "task.started", {"id": "t2"})
    ask(j, "alice", "a1")
    view = fold(Tasks(), j.envelopes)
    assert view.working_on("alice") == "t2"
    assert view.snapshot()["approval_task"] == {"a1": "t2"}


@pytest.mark.parametrize(("operator", "recorded"), [("carol", "carol"), (None, ""), (7, "")])
def test_cancel_records_who_canceled_and_the_first_holds(operator: Any, recorded: str) -> None:
    j = Journal()
    create(j, "alice", "t1")
    j.add("alice", "task.canceled", {"id": "t1", "operator": operator})
    j.add("alice", "task.canceled", {"id": "t1", "operator": "dave"})
    view = fold(Tasks(), j.envelopes)
    assert view.canceled_by("t1") == recorded
    assert view.snapshot()["canceled"] == {"t1": recorded}
    assert view.snapshot()["updated"] == {
        "t1": ts_at(2)
    }  # canceled is final: the second is no change


def test_a_canceled_task_stays_what_its_worker_runs() -> None:
    """Cancel does not stop the worker (its result is refused later), so an approval it asks
    meanwhile is still the canceled task's; its end is a task.completed/failed."""
    j = Journal()
    create(j, "alice", "t1")
    j.add("alice", "task.started", {"id": "t1"})
    j.add("alice", "task.canceled", {"id": "t1", "operator": "carol"})
    ask(j, "alice", "a1")
    view = fold(Tasks(), j.envelopes)
    assert view.working_on("alice") == "t1"
    assert view.pending_approvals("t1") == ["a1"]


def test_approvals_asked_while_working_are_the_tasks_until_resolved() -> None:
    j = Journal()
    create(j, "alice", "t1")
    j.add("alice", "task.started", {"id": "t1"})
    ask(j, "alice", "a1")
    ask(j, "alice", "a2")
    ask(j, "alice", "a1")  # the same id again: already linked
    view = fold(Tasks(), j.envelopes)
    assert view.pending_approvals("t1") == ["a1", "a2"]
    assert view.snapshot()["approval_task"] == {"a1": "t1", "a2": "t1"}
    assert view.updated_at("t1") == ts_at(4)
    j.add("alice", "approval.decided", {"id": "a1", "decision": "approve"})
    view = fold(Tasks(), j.envelopes)
    assert view.pending_approvals("t1") == ["a2"]
    assert view.updated_at("t1") == ts_at(6)
    j.add("alice", "approval.timed_out", {"id": "a2"})
    view = fold(Tasks(), j.envelopes)
    assert view.pending_approvals("t1") == []
    assert view.snapshot()["waiting"] == {}  # no entry left: no longer input-required
    assert view.updated_at("t1") == ts_at(7)


def test_pending_approvals_are_in_request_order_and_per_task() -> None:
    """Request order, not id order; a task whose id starts like another's has its own."""
    j = Journal()
    create(j, "alice", "t")
    create(j, "bob", "t0")
    j.add("alice", "task.started", {"id": "t"})
    j.add("bob", "task.started", {"id": "t0"})
    ask(j, "alice", "z")
    ask(j, "bob", "b")
    ask(j, "alice", "a")
    view = fold(Tasks(), j.envelopes)
    assert view.pending_approvals("t") == ["z", "a"]
    assert view.pending_approvals("t0") == ["b"]
    assert view.snapshot()["waiting"] == {"t": ["z", "a"], "t0": ["b"]}
    j.add("alice", "task.completed", {"id": "t"})
    view = fold(Tasks(), j.envelopes)
    assert view.pending_approvals("t") == []
    assert view.pending_approvals("t0") == ["b"]


def test_approvals_outside_a_task_or_unknown_are_ignored() -> None:
    j = Journal()
    ask(j, "alice", "a0")  # alice works on nothing
    create(j, "bob", "t1")
    j.add("bob", "task.started", {"id": "t1"})
    ask(j, "alice", "a1")  # bob works on t1, alice still on nothing
    j.add("bob", "approval.decided", {"id": "zzz", "decision": "approve"})
    j.add("alice", "approval.decided", {"id": "a0", "decision": "approve"})
    view = fold(Tasks(), j.envelopes)
    assert view.approval_task_of("a0") is None and view.approval_task_of("a1") is None
    assert view.snapshot()["approval_task"] == {}
    assert view.snapshot()["waiting"] == {}
    assert view.snapshot()["updated"] == {"t1": ts_at(3)}


def test_a_resolution_after_the_task_ended_changes_nothing() -> None:
    j = Journal()
    create(j, "alice", "t1")
    j.add("alice", "task.started", {"id": "t1"})
    ask(j, "alice", "a1")
    j.add("alice", "task.completed", {"id": "t1", "output": {}})
    j.add("alice", "approval.timed_out", {"id": "a1"})
    view = fold(Tasks(), j.envelopes)
    assert view.snapshot()["updated"] == {"t1": ts_at(4)}
    assert view.snapshot()["waiting"] == {}


def test_events_for_tasks_never_created_and_without_ids_are_ignored() -> None:
    j = Journal()
    j.add("alice", "task.started", {"id": "ghost"})
    j.add("alice", "task.canceled", {"id": "ghost", "operator": "x"})
    j.add("alice", "task.completed", {"id": "ghost"})
    j.add("alice", "task.created", {"a2a": CONTEXT})  # no id
    j.add("alice", "approval.requested", {"id": 3})
    j.add("alice", "task.created", {"id": "", "a2a": CONTEXT})  # an id that names nothing
    view = fold(Tasks(), j.envelopes)
    assert view.snapshot() == empty()
    assert view.context_of("") == {}


def test_an_id_longer_than_an_lmdb_key_is_kept() -> None:
    j = Journal()
    create(j, "alice", "x" * 600, a2a=CONTEXT)
    j.add("alice", "task.canceled", {"id": "x" * 600, "operator": "op"})
    view = fold(Tasks(), j.envelopes)
    assert view.context_of("x" * 600) == CONTEXT
    assert view.canceled_by("x" * 600) == "op" and view.updated_at("x" * 600) is not None


def test_other_event_types_change_nothing() -> None:
    view = fold(Tasks(), [])
    with view.space.env.begin(write=True) as txn:  # past the registry's filter
        view.fold(txn, envelope("alice", 1, "log", {"id": "t1", "a2a": CONTEXT}, position=1))
    assert view.snapshot() == empty()
    assert "log" not in view.handles
    assert {"task.created", "approval.decided"} <= view.handles


def test_snapshot_and_refold() -> None:
    j = Journal()
    create(j, "bob", "t2", a2a={"contextId": "c2"})
    create(j, "alice", "t1", a2a=CONTEXT)
    j.add("alice", "task.started", {"id": "t1"})
    ask(j, "alice", "a2")
    ask(j, "alice", "a1")
    j.add("bob", "task.canceled", {"id": "t2", "operator": "op"})
    view = fold(Tasks(), j.envelopes)
    snapshot = view.snapshot()
    assert {k: snapshot[k] for k in A2A_KEYS} == {
        "context": {"t1": CONTEXT, "t2": {"contextId": "c2"}},
        "canceled": {"t2": "op"},
        "updated": {"t1": ts_at(5), "t2": ts_at(6)},
        "working_on": {"alice": "t1"},
        "approval_task": {"a1": "t1", "a2": "t1"},
        "waiting": {"t1": ["a2", "a1"]},  # in request order
    }
    assert refolded_snapshot(view, j.envelopes) == snapshot


# --- where the A2A view once disagreed with REST: one state machine now (issue 28) ----------


def test_a_task_event_from_another_journal_is_ignored() -> None:
    """Kept out by the ownership rule, which the node applies before every fold of a task
    event (`fold` here does the same)."""
    j = Journal()
    create(j, "alice", "t1")
    j.add("bob", "task.canceled", {"id": "t1", "operator": "mallory"})
    j.add("bob", "task.started", {"id": "t1"})
    tasks, view = fold(Tasks(), j.envelopes), fold(Tasks(), j.envelopes)
    task = tasks.get("t1")
    assert task is not None and task.status == "pending"
    assert view.canceled_by("t1") is None
    assert view.working_on("bob") is None
    assert view.snapshot()["working_on"] == {}


def test_a_decision_from_another_journal_leaves_the_task_waiting() -> None:
    """Kept out by the ownership rule too (the approval is alice's)."""
    j = Journal()
    create(j, "alice", "t1")
    j.add("alice", "task.started", {"id": "t1"})
    ask(j, "alice", "a1")
    j.add("bob", "approval.decided", {"id": "a1", "decision": "approve"})
    approvals, view = fold(Approvals(), j.envelopes), fold(Tasks(), j.envelopes)
    assert approvals.get("a1") is not None
    assert view.pending_approvals("t1") == ["a1"]


@pytest.mark.parametrize("decision", ["maybe", None])
def test_a_task_waits_while_its_approval_is_still_pending(decision: Any) -> None:
    j = Journal()
    create(j, "alice", "t1")
    j.add("alice", "task.started", {"id": "t1"})
    ask(j, "alice", "a1")
    j.add("alice", "approval.decided", {"id": "a1", "decision": decision})
    approvals, view = fold(Approvals(), j.envelopes), fold(Tasks(), j.envelopes)
    assert approvals.get("a1") is not None  # the approvals read model: still pending
    assert view.pending_approvals("t1") == ["a1"]
    assert view.state_of("t1") is TaskState.INPUT_REQUIRED  # so A2A says input-required
    assert a2a_state(TaskState.INPUT_REQUIRED) == "TASK_STATE_INPUT_REQUIRED"


def test_a_cancel_after_the_task_completed_is_ignored() -> None:
    j = Journal()
    create(j, "alice", "t1")
    j.add("alice", "task.completed", {"id": "t1", "output": {"ok": True}})
    j.add("alice", "task.canceled", {"id": "t1", "operator": "late"})
    tasks, view = fold(Tasks(), j.envelopes), fold(Tasks(), j.envelopes)
    task = tasks.get("t1")
    assert task is not None and task.status == "completed"
    assert view.canceled_by("t1") is None
    assert view.updated_at("t1") == ts_at(2)
    assert view.state_of("t1") is TaskState.COMPLETED  # A2A: COMPLETED, not CANCELED
    assert [ch.after for ch in view.changes(j.envelopes[2])] == []  # the cancel changed nothing
