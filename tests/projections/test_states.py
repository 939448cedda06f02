"""The one state machine: every task and approval transition, the changes a fold reports and
keeps under the event's position, and what each protocol calls a state."""

from __future__ import annotations

import msgspec
import pytest

from projections.states import (
    A2A_STATES,
    ApprovalChanged,
    ApprovalState,
    TaskChanged,
    TaskState,
    a2a_state,
    approval_resolved,
    decode_changes,
    encode_changes,
    rest_status,
    task_ended,
    task_progressed,
    task_started,
    task_waiting,
)
from projections.tasks import Tasks
from tests.projections.envelopes import Journal, fold

T = TaskState
FINAL = (T.COMPLETED, T.FAILED, T.CANCELED)


@pytest.mark.parametrize("state", list(TaskState))
def test_final_states_are_final(state: TaskState) -> None:
    if state in FINAL:
        assert task_started(state) is None and task_progressed(state) is None
        assert all(task_ended(state, end) is None for end in FINAL)
        assert task_waiting(state, True) is None and task_waiting(state, False) is None
    else:
        assert all(task_ended(state, end) is end for end in FINAL)


def test_the_task_transitions() -> None:
    assert task_started(T.PENDING) is T.RUNNING
    assert task_started(T.RUNNING) is None  # started again after a restart: no change
    assert task_progressed(T.PENDING) is T.RUNNING
    assert task_progressed(T.RUNNING) is T.RUNNING  # a change: the progress it reported
    assert task_progressed(T.INPUT_REQUIRED) is T.INPUT_REQUIRED  # still waits
    assert task_waiting(T.RUNNING, True) is T.INPUT_REQUIRED
    assert task_waiting(T.INPUT_REQUIRED, False) is T.RUNNING
    assert task_waiting(T.PENDING, True) is None


def test_only_approve_deny_and_timeout_resolve_and_only_a_pending_approval() -> None:
    A = ApprovalState
    assert approval_resolved(A.PENDING, "approve") is A.APPROVED
    assert approval_resolved(A.PENDING, "deny") is A.DENIED
    assert approval_resolved(A.PENDING, "timeout") is A.TIMED_OUT
    assert approval_resolved(A.PENDING, "maybe") is None
    assert approval_resolved(A.DENIED, "approve") is None
    assert approval_resolved(None, "approve") is None


def test_every_protocol_name_is_a_function_of_the_one_state() -> None:
    assert [rest_status(s) for s in TaskState] == [
        "pending",
        "running",
        "running",
        "completed",
        "failed",
        "failed",
    ]
    assert set(A2A_STATES) == set(TaskState)
    assert a2a_state(T.CANCELED) == "TASK_STATE_CANCELED"


def test_changes_round_trip() -> None:
    changes = [
        TaskChanged(task="t", agent="a", before=None, after=T.PENDING, position=1),
        ApprovalChanged(
            approval="x",
            agent="a",
            task="t",
            before=ApprovalState.PENDING,
            after=ApprovalState.APPROVED,
            position=2,
        ),
    ]
    assert decode_changes(encode_changes(changes)) == changes


def test_folding_returns_and_keeps_the_changes_of_each_event() -> None:
    j = Journal()
    j.add("alice", "task.created", {"id": "t1", "from": "boss", "input": {}})
    j.add("alice", "task.started", {"id": "t1"})
    j.add("alice", "approval.requested", {"id": "a1", "capability": "http"})
    j.add("alice", "task.progress", {"id": "t1", "progress": 5})
    j.add("alice", "approval.decided", {"id": "a1", "decision": "approve", "operator": "op"})
    j.add("alice", "task.started", {"id": "t1"})  # again: nothing changes
    j.add("alice", "task.completed", {"id": "t1", "output": {}})
    j.add("alice", "task.canceled", {"id": "t1"})  # after the end: nothing changes
    j.add("alice", "log", {"message": "hi"})  # not a task event
    tasks = fold(Tasks(), j.envelopes)
    seen = [
        [(type(ch).__name__, ch.before, ch.after) for ch in tasks.changes(e)] for e in j.envelopes
    ]
    A = ApprovalState
    assert seen == [
        [("TaskChanged", None, T.PENDING)],
        [("TaskChanged", T.PENDING, T.RUNNING)],
        [("ApprovalChanged", None, A.PENDING), ("TaskChanged", T.RUNNING, T.INPUT_REQUIRED)],
        [("TaskChanged", T.INPUT_REQUIRED, T.INPUT_REQUIRED)],
        [("ApprovalChanged", A.PENDING, A.APPROVED), ("TaskChanged", T.INPUT_REQUIRED, T.RUNNING)],
        [],
        [("TaskChanged", T.RUNNING, T.COMPLETED)],
        [],
        [],
    ]
    approval = tasks.approval_change(j.envelopes[4])
    assert approval is not None and approval.task == "t1" and approval.outcome == "approve"
    assert [ch.position for e in j.envelopes for ch in tasks.changes(e)] == [
        e.position for e in j.envelopes for _ in tasks.changes(e)
    ]
    record = tasks.record("t1")
    assert record is not None and record.state is T.COMPLETED and record.task.status == "completed"


def test_an_open_task_says_what_it_waits_for() -> None:
    j = Journal()
    j.add("alice", "task.created", {"id": "t1", "from": "boss", "input": {}})
    j.add("alice", "task.created", {"id": "t2", "from": "boss", "input": {}})
    j.add("alice", "task.started", {"id": "t1"})
    j.add("alice", "approval.requested", {"id": "a1", "capability": "spend"})
    tasks = fold(Tasks(), j.envelopes)
    waiting, queued = tasks.get("t1"), tasks.get("t2")
    assert waiting is not None and waiting.waiting_for == "waiting for approval of spend"
    assert queued is not None and queued.waiting_for == "queued behind task t1"
    assert [t.waiting_for for t in tasks.list(agent="alice")] == [
        "waiting for approval of spend",
        "queued behind task t1",
    ]
    j.add("alice", "approval.decided", {"id": "a1", "decision": "approve"})
    j.add("alice", "task.completed", {"id": "t1", "output": {}})
    tasks = fold(Tasks(), j.envelopes)
    done, next_up = tasks.get("t1"), tasks.get("t2")
    assert done is not None and next_up is not None
    assert msgspec.UNSET is done.waiting_for is next_up.waiting_for  # nothing left to wait for
