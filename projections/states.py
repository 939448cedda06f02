"""The one state machine of tasks and approvals: their states, the changes a fold reports, and
what every protocol calls each state.

Why one module: REST, A2A, AG-UI, the SSE streams, the runtime's queue and the approval gate
all show or act on the same task and approval, and each used to derive "what state is it in"
from raw events, so they disagreed (a task REST showed completed was CANCELED in A2A). Now the
tasks read model (projections/tasks.py) is the only fold that decides a transition; folding an
event yields the changes it made (`TaskChanged`, `ApprovalChanged`), stored with the event's
position, and every consumer reads those changes and names states with the functions below.

Transitions (anything else changes nothing):
  task      (none) --created--> pending --started/progress--> running
            running <--> input_required   while an approval its run asked for is pending
            running --awaiting--> running (working) or input_required: its run ended and it
                      awaits its client's next message (multi-turn); --message--> running
            pending|running|input_required --completed--> completed
                                           --failed-->    failed
                                           --canceled-->  canceled
            completed, failed and canceled are final.
  approval  (none) --requested--> pending --decided approve--> approved
                                          --decided deny-->    denied
                                          --timed out-->       timed_out
                                          --abandoned-->       abandoned (by the node)
            only a decision of "approve" or "deny" decides; the first resolution is final; a
            decision recorded for later (nobody waits) leaves it pending, with the decision.
"""

from __future__ import annotations

from enum import StrEnum

import msgspec


class TaskState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    INPUT_REQUIRED = "input_required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"


class ApprovalState(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    TIMED_OUT = "timed_out"
    ABANDONED = "abandoned"


FINAL_TASK_STATES = frozenset({TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED})
OPEN_TASK_STATES = frozenset({TaskState.PENDING, TaskState.RUNNING, TaskState.INPUT_REQUIRED})
OUTCOMES = {  # an approval's final state as the spec's outcome word
    ApprovalState.APPROVED: "approve",
    ApprovalState.DENIED: "deny",
    ApprovalState.TIMED_OUT: "timeout",
    ApprovalState.ABANDONED: "abandoned",
}
STATE_OF_OUTCOME = {outcome: state for state, outcome in OUTCOMES.items()}


class TaskChanged(msgspec.Struct, frozen=True, kw_only=True, tag="task", array_like=True):
    """A task's state before and after one event (`before` None: the event created it; equal
    states: the event reported progress)."""

    task: str
    agent: str
    before: TaskState | None
    after: TaskState
    position: int

    @property
    def created(self) -> bool:
        return self.before is None

    @property
    def ended(self) -> bool:
        return self.after in FINAL_TASK_STATES and self.before not in FINAL_TASK_STATES


class ApprovalChanged(msgspec.Struct, frozen=True, kw_only=True, tag="approval", array_like=True):
    """An approval's state before and after one event, and the task whose run asked for it."""

    approval: str
    agent: str
    task: str | None
    before: ApprovalState | None
    after: ApprovalState
    position: int
    # a decision recorded on a pending request nobody waits for (`approval.decided` `later`):
    # no transition yet, it applies when the agent asks for the same again
    recorded: str | None = None

    @property
    def requested(self) -> bool:
        return self.before is None

    @property
    def outcome(self) -> str | None:
        """ "approve", "deny" or "timeout" once resolved; None while pending."""
        return OUTCOMES.get(self.after)


Change = TaskChanged | ApprovalChanged


# ----------------------------------------------------------------------------- the rules
def task_started(before: TaskState) -> TaskState | None:
    """`task.started`: a pending task runs (started again after a restart: no change)."""
    return TaskState.RUNNING if before is TaskState.PENDING else None


def task_progressed(before: TaskState) -> TaskState | None:
    """`task.progress`: an open task reports progress (a pending one is running by then; a
    waiting one still waits)."""
    if before in FINAL_TASK_STATES:
        return None
    return TaskState.RUNNING if before is TaskState.PENDING else before


def task_ended(before: TaskState, end: TaskState) -> TaskState | None:
    """`task.completed`, `task.failed` or `task.canceled`: only an open task ends."""
    return None if before in FINAL_TASK_STATES else end


def task_awaiting(before: TaskState, input_required: bool) -> TaskState | None:
    """`task.awaiting`: a running task's run ended without ending it; it awaits its client,
    input-required when the agent asked for input, else still working."""
    if before is not TaskState.RUNNING:
        return None
    return TaskState.INPUT_REQUIRED if input_required else TaskState.RUNNING


def task_answered(before: TaskState, awaiting: bool) -> TaskState | None:
    """`task.message`: only a task that awaits its client takes the next message; it runs."""
    return TaskState.RUNNING if awaiting and before in OPEN_TASK_STATES else None


def task_waiting(before: TaskState, waiting: bool) -> TaskState | None:
    """A task's run asked for an approval (`waiting`) or its last pending one resolved."""
    if waiting and before is TaskState.RUNNING:
        return TaskState.INPUT_REQUIRED
    if not waiting and before is TaskState.INPUT_REQUIRED:
        return TaskState.RUNNING
    return None


def approval_resolved(before: ApprovalState | None, outcome: str) -> ApprovalState | None:
    """A decision, a timeout or the node abandoning it: only a pending approval, only a known
    outcome."""
    after = STATE_OF_OUTCOME.get(outcome)
    return after if before is ApprovalState.PENDING and after is not None else None


# ----------------------------------------------------------------------------- names
def rest_status(state: TaskState) -> str:
    """The spec's task status: it has no input-required (still running) nor canceled (a
    failure, with the canceling operator in `error`)."""
    if state is TaskState.INPUT_REQUIRED:
        return "running"
    if state is TaskState.CANCELED:
        return "failed"
    return state.value


A2A_STATES = {
    TaskState.PENDING: "TASK_STATE_SUBMITTED",
    TaskState.RUNNING: "TASK_STATE_WORKING",
    TaskState.INPUT_REQUIRED: "TASK_STATE_INPUT_REQUIRED",
    TaskState.COMPLETED: "TASK_STATE_COMPLETED",
    TaskState.FAILED: "TASK_STATE_FAILED",
    TaskState.CANCELED: "TASK_STATE_CANCELED",
}


def a2a_state(state: TaskState) -> str:
    return A2A_STATES[state]


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(list[TaskChanged | ApprovalChanged])


def encode_changes(changes: list[Change]) -> bytes:
    return _encoder.encode(changes)


def decode_changes(raw: bytes | memoryview) -> list[Change]:
    return _decoder.decode(raw)
