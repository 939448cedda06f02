"""Tasks and their approvals: the one read model that decides their states (projections/states.py).

It folds every task.* and approval.* event of the journal that owns it (the ownership rule,
projections/ownership.py, runs in front) and is the only place a transition is decided; the
approvals' own tables (`Approvals`, projections/approvals.py) are one of its parts, folded by it.
Each event that changed something leaves its changes (`TaskChanged`, `ApprovalChanged`) under its
position, so a consumer that sees the envelope, live or from history, reads what it did with
`changes(envelope)` instead of deriving it again.

What a task shows beyond the spec's object (the A2A view, folded here since it is the same
task): its A2A context (`task.created`'s `a2a` map), who canceled it, when its state last
changed, and the approvals it waits for. An approval belongs to the task its agent was working
on when it asked: a worker runs one thing at a time, so between `task.started` and that task's
end every approval the agent requests is the task's; while one of them is pending the task is
input-required.

On disk (projections/disk.py), nothing in the heap:
`task`          id → (creation position, the Task, its state, canceled by, updated at)
`created`       u64(position) → id, every task in creation order
`by_agent`      agent\0u64(position) → id, one agent's tasks in creation order
`open`          agent\0u64(position) → id, the open ones: what a restart delivers again
`updated`       agent\0u64(position of its last change) → (state, updated at, id) in msgpack:
                one agent's tasks in the order they last changed (A2A's ListTasks)
`changed`       task id → u64(position of its last change): its key in `updated`
`context`       task id → its `a2a` map in msgpack (only tasks that carried one)
`working_on`    agent → the task its worker is running
`approval_task` approval id → `task id\0u64(request position)`: the task that asked
`waiting`       `task id\0u64(request position)` → approval id: a task's pending approvals
`changes`       u64(position) → the changes that event made
`awaiting`      task id → input-required? (msgpack bool): its run ended, it awaits its client
`turns`         `task id\0u64(position)` → one turn of a multi-turn task, in order: the agent's
                (`task.awaiting`: what it said) or the client's (`task.message`)
`turn_input`    task id → the input of the client's latest message: what the next run gets
An id that cannot be an LMDB key (empty, or over 400 bytes) is no task: its events are ignored.
"""

from __future__ import annotations

import builtins
from collections.abc import Generator, Iterable, Iterator
from typing import Any, Literal

import msgspec

from eventstore.envelope import Envelope
from projections import catalogue as c
from projections import states as s
from projections.approvals import APPROVAL_EVENTS, Approvals
from projections.disk import Space, Txn, from_u64, key_of, u64
from projections.states import ApprovalChanged, Change, TaskChanged, TaskState

STATUSES = ("pending", "running", "completed", "failed")
Status = Literal["pending", "running", "completed", "failed"]
TASK_EVENTS = frozenset(
    {
        c.TASK_CREATED,
        c.TASK_STARTED,
        c.TASK_PROGRESS,
        c.TASK_COMPLETED,
        c.TASK_FAILED,
        c.TASK_CANCELED,
        c.TASK_AWAITING,
        c.TASK_MESSAGE,
    }
)
_ENDS = {
    c.TASK_COMPLETED: TaskState.COMPLETED,
    c.TASK_FAILED: TaskState.FAILED,
    c.TASK_CANCELED: TaskState.CANCELED,
}
_MAX_KEY = 511


class Task(msgspec.Struct, kw_only=True):
    """The spec's task object; `progress` (latest report) and `error` appear once they exist."""

    id: str
    from_: str = msgspec.field(name="from")
    to: str
    status: Status
    input: dict[str, Any]
    output: dict[str, Any] | None = None
    created_at: str
    completed_at: str | None = None
    progress: Any = msgspec.UNSET
    error: str | msgspec.UnsetType = msgspec.UNSET
    # who made it: the API token (absent when an agent of this node did, and `from` is that
    # agent); `from_asserted` when the token named someone else as `from` (its word only)
    created_by: str | msgspec.UnsetType = msgspec.UNSET
    from_asserted: bool | msgspec.UnsetType = msgspec.UNSET
    # what an open task waits for, read when it is served (never stored): "waiting for
    # approval of spend", "queued behind task t-1"
    waiting_for: str | msgspec.UnsetType = msgspec.UNSET
    # in a list: the fields left out for their size (read the task alone for them); never
    # stored
    elided: builtins.list[str] | msgspec.UnsetType = msgspec.UNSET


class TaskRecord(msgspec.Struct, kw_only=True):
    """Everything known of one task: the spec's object and the one state behind its status."""

    task: Task
    state: TaskState
    canceled_by: str | None  # "" when the cancel named nobody
    updated_at: str  # when its state last changed
    position: int  # of its creation


_encode = msgspec.msgpack.Encoder().encode
# untyped: an input or output from a journal may hold maps a typed decode would refuse
_decode = msgspec.msgpack.Decoder().decode


class Listed(msgspec.Struct, frozen=True):
    """One task as a listing filters and orders it, its task itself not decoded."""

    id: str
    state: TaskState
    updated_at: str  # when its state last changed


def id_key(item_id: str) -> bytes | None:
    """The id as a key with room for a position after it (the approval index); a longer one
    as its digest (`key_of`); None for an empty id, which names nothing."""
    return key_of(item_id, 9) if item_id else None


class Tasks:
    name = "tasks"
    handles = TASK_EVENTS | APPROVAL_EVENTS
    space: Space

    def __init__(self) -> None:
        self.approvals = Approvals()
        self.parts = (self.approvals,)

    def bind(self, space: Space) -> None:
        self.space = space
        self.approvals.bind(space)
        db = space.db
        self._task, self._created = db(self.name, "task"), db(self.name, "created")
        self._by_agent, self._open = db(self.name, "by_agent"), db(self.name, "open")
        self._context, self._working_on = db(self.name, "context"), db(self.name, "working_on")
        self._approval_task, self._waiting = (
            db(self.name, "approval_task"),
            db(self.name, "waiting"),
        )
        self._changes = db(self.name, "changes")
        self._awaiting, self._turns = db(self.name, "awaiting"), db(self.name, "turns")
        self._turn_input = db(self.name, "turn_input")
        self._updated, self._changed = db(self.name, "updated"), db(self.name, "changed")

    # ------------------------------------------------------------------ the fold
    def fold(self, txn: Txn, envelope: Envelope) -> builtins.list[Change]:
        kind = envelope.event.type
        if kind in APPROVAL_EVENTS:
            changes = self._approval(txn, envelope)
        elif kind in TASK_EVENTS:
            changes = self._task_event(txn, envelope, kind)
        else:
            return []
        if changes:
            txn.put(u64(envelope.position), s.encode_changes(changes), db=self._changes)
        return changes

    def _task_event(self, txn: Txn, envelope: Envelope, kind: str) -> builtins.list[Change]:
        data = envelope.event.data
        task_id = data.get("id")
        key = id_key(task_id) if isinstance(task_id, str) else None
        if key is None or not isinstance(task_id, str):
            return []
        if kind == c.TASK_CREATED:
            return self._created_task(txn, envelope, task_id, key)
        record = self._record(txn, key)
        if record is None or record.task.to != envelope.stream:
            return []
        task, before = record.task, record.state
        agent = envelope.stream.encode()
        if kind == c.TASK_STARTED:
            if before in s.OPEN_TASK_STATES:
                txn.put(agent, key, db=self._working_on)  # started again after a restart too
            after = s.task_started(before)
        elif kind in (c.TASK_COMPLETED, c.TASK_FAILED):
            # the worker's run of it ended (for a canceled task too: cancel does not stop the
            # worker, so until then what it asks is still that task's)
            if txn.get(agent, db=self._working_on) == key:
                txn.delete(agent, db=self._working_on)
            for waiting, _ in self._waiting_of(txn, key):
                txn.delete(waiting, db=self._waiting)
            after = s.task_ended(before, _ENDS[kind])
        elif kind == c.TASK_PROGRESS:
            after = s.task_progressed(before)
            if after is not None and "progress" in data:
                task.progress = data["progress"]
        elif kind == c.TASK_AWAITING:
            after = self._awaited(txn, envelope, key, before)
        elif kind == c.TASK_MESSAGE:
            after = self._answered(txn, envelope, key, before)
        else:
            after = s.task_ended(before, _ENDS[kind])
        if after is None:
            return []
        ts = envelope.event.ts
        if kind == c.TASK_COMPLETED:
            output = data.get("output")
            task.output = output if isinstance(output, dict) else {}
        elif kind == c.TASK_FAILED:
            task.error = str(data.get("error", ""))
        elif kind == c.TASK_CANCELED:
            operator = data.get("operator")
            record.canceled_by = operator if isinstance(operator, str) else ""
            task.error = f"canceled by {operator or 'an operator'}"
        if after in s.FINAL_TASK_STATES:
            task.completed_at = ts
            txn.delete(_agent_key(task.to, record.position), db=self._open)
            txn.delete(key, db=self._awaiting)
        self._save(txn, key, record, after, ts, envelope.position)
        return [
            TaskChanged(
                task=task_id, agent=task.to, before=before, after=after, position=envelope.position
            )
        ]

    def _awaited(
        self, txn: Txn, envelope: Envelope, key: bytes, before: TaskState
    ) -> TaskState | None:
        """`task.awaiting`: the run ended (as a completion would end it), the task stays."""
        payload = c.read(c.TaskAwaiting, envelope.event.data)
        after = None if payload is None else s.task_awaiting(before, payload.input_required)
        if payload is None or after is None:
            return None
        agent = envelope.stream.encode()
        if txn.get(agent, db=self._working_on) == key:
            txn.delete(agent, db=self._working_on)
        txn.put(key, _encode(payload.input_required), db=self._awaiting)
        self._add_turn(
            txn,
            key,
            envelope,
            role="agent",
            inputRequired=payload.input_required,
            message=payload.message,
            reply=payload.reply,
        )
        return after

    def _answered(
        self, txn: Txn, envelope: Envelope, key: bytes, before: TaskState
    ) -> TaskState | None:
        """`task.message`: the client's next message; the task is deliverable again."""
        payload = c.read(c.TaskMessage, envelope.event.data)
        awaiting = txn.get(key, db=self._awaiting) is not None
        after = None if payload is None else s.task_answered(before, awaiting)
        if payload is None or after is None:
            return None
        txn.delete(key, db=self._awaiting)
        txn.put(key, _encode(payload.input), db=self._turn_input)
        self._add_turn(
            txn,
            key,
            envelope,
            role="user",
            input=payload.input,
            message=payload.a2a,
            operator=payload.operator,
        )
        return after

    def _add_turn(self, txn: Txn, key: bytes, envelope: Envelope, **fields: Any) -> None:
        """One turn of the task, after its others: its fields that are set, its event's
        sequence number and time."""
        turn = {"seq": envelope.seq, "ts": envelope.event.ts}
        turn.update((name, value) for name, value in fields.items() if value is not None)
        txn.put(_turn_key(key, envelope.position), _encode(turn), db=self._turns)

    def _created_task(
        self, txn: Txn, envelope: Envelope, task_id: str, key: bytes
    ) -> builtins.list[Change]:
        if txn.get(key, db=self._task) is not None:
            return []  # the first create of an id wins
        data, position = envelope.event.data, envelope.position
        raw_input = data.get("input")
        task = Task(
            id=task_id,
            from_=str(data.get("from", "")),
            to=envelope.stream,
            status="pending",
            input=raw_input if isinstance(raw_input, dict) else {},
            created_at=envelope.event.ts,
        )
        if isinstance(caller := data.get("caller"), str):
            task.created_by = caller
            if caller != task.from_:
                task.from_asserted = True
        record = TaskRecord(
            task=task, state=TaskState.PENDING, canceled_by=None, updated_at="", position=position
        )
        self._save(txn, key, record, TaskState.PENDING, envelope.event.ts, position)
        txn.put(u64(position), key, db=self._created)
        txn.put(_agent_key(task.to, position), key, db=self._by_agent)
        txn.put(_agent_key(task.to, position), key, db=self._open)
        context = data.get("a2a")
        if isinstance(context, dict):
            txn.put(key, _encode(context), db=self._context)
        return [
            TaskChanged(
                task=task_id, agent=task.to, before=None, after=TaskState.PENDING, position=position
            )
        ]

    def _approval(self, txn: Txn, envelope: Envelope) -> builtins.list[Change]:
        """The approval's own transition (its part decides it), then what it does to the task
        whose run asked: waiting while a request of its run is pending."""
        change = self.approvals.fold(txn, envelope)
        if change is None or (not change.requested and change.outcome is None):
            return [] if change is None else [change]  # none, or a decision for later
        approval = id_key(change.approval)
        if approval is None:
            return [change]
        link: bytes | None
        if change.requested:
            task = txn.get(envelope.stream.encode(), db=self._working_on)
            link = None if task is None else b"".join((task, b"\0", u64(envelope.position)))
            if link is not None:
                txn.put(approval, link, db=self._approval_task)
                txn.put(link, approval, db=self._waiting)
        else:
            link = txn.get(approval, db=self._approval_task)
            if link is not None and not txn.delete(link, db=self._waiting):
                link = None  # its task ended meanwhile: nothing waits for it any more
        if link is None:
            return [change]
        task_key = link[:-9]
        record = self._record(txn, task_key)
        if record is None:
            return [change]
        change = msgspec.structs.replace(change, task=record.task.id)
        waiting = bool(self._waiting_of(txn, task_key))
        before = record.state
        after = s.task_waiting(before, waiting)
        # what the task waits for changed, so its status did (its message lists them)
        self._save(txn, task_key, record, after or before, envelope.event.ts, envelope.position)
        if after is None:
            return [change]
        return [
            change,
            TaskChanged(
                task=record.task.id,
                agent=record.task.to,
                before=before,
                after=after,
                position=envelope.position,
            ),
        ]

    def _save(
        self, txn: Txn, key: bytes, record: TaskRecord, state: TaskState, ts: str, position: int
    ) -> None:
        """Store the record as changed at `position` (its place in the `updated` order)."""
        record.state, record.updated_at = state, ts
        record.task.status = s.rest_status(state)  # type: ignore[assignment]
        stored = (record.position, record.task, state.value, record.canceled_by, ts)
        txn.put(key, _encode(stored), db=self._task)
        agent = record.task.to
        before = txn.get(key, db=self._changed)
        if before is not None:
            txn.delete(_agent_key(agent, from_u64(before)), db=self._updated)
        txn.put(
            _agent_key(agent, position),
            _encode((state.value, ts, record.task.id)),
            db=self._updated,
        )
        txn.put(key, u64(position), db=self._changed)

    def _record(self, txn: Txn, key: bytes) -> TaskRecord | None:
        raw = txn.get(key, db=self._task)
        return _stored(raw) if raw is not None else None

    def _waiting_of(self, txn: Txn, task: bytes) -> builtins.list[tuple[bytes, str]]:
        """The `waiting` keys of one task and their approval ids, in request order."""
        prefix = task + b"\0"
        cursor = txn.cursor(self._waiting)
        found: builtins.list[tuple[bytes, str]] = []
        if cursor.set_range(prefix):
            for raw_key, approval in cursor:
                key = bytes(raw_key)
                if not key.startswith(prefix):
                    break
                if len(key) == len(prefix) + 8:  # not a longer id that starts alike
                    found.append((key, _text(approval)))
        return found

    # ------------------------------------------------------------------ changes
    def changes(self, envelope: Envelope) -> builtins.list[Change]:
        """What the envelope did to tasks and approvals ([] when it changed nothing)."""
        if envelope.event.type not in self.handles:
            return []
        with self.space.read() as txn:
            raw = txn.get(u64(envelope.position), db=self._changes)
        return s.decode_changes(raw) if raw is not None else []

    def task_changes(self, envelope: Envelope) -> builtins.list[TaskChanged]:
        return [ch for ch in self.changes(envelope) if isinstance(ch, TaskChanged)]

    def approval_change(self, envelope: Envelope) -> ApprovalChanged | None:
        for change in self.changes(envelope):
            if isinstance(change, ApprovalChanged):
                return change
        return None

    # ------------------------------------------------------------------ reads
    def get(self, task_id: str) -> Task | None:
        record = self.record(task_id)
        return self._served(record) if record is not None else None

    def _served(self, record: TaskRecord) -> Task:
        """The task with what it waits for, when it waits."""
        task = record.task
        if record.state in (TaskState.RUNNING, TaskState.INPUT_REQUIRED) and self.awaits(task.id):
            task.waiting_for = "waiting for the next message from its client"
        elif record.state is TaskState.INPUT_REQUIRED:
            asked = [self.approvals.get(i) for i in self.pending_approvals(task.id)]
            capabilities = sorted({r.capability for r in asked if r is not None})
            if capabilities:
                task.waiting_for = "waiting for approval of " + ", ".join(capabilities)
        elif record.state is TaskState.PENDING:
            running = self.working_on(task.to)
            if running is not None and running != task.id:
                task.waiting_for = f"queued behind task {running}"
        return task

    def record(self, task_id: str) -> TaskRecord | None:
        key = id_key(task_id)
        if key is None:
            return None
        with self.space.read() as txn:
            return self._record(txn, key)

    def state_of(self, task_id: str) -> TaskState | None:
        record = self.record(task_id)
        return record.state if record is not None else None

    def list(self, status: str | None = None, agent: str | None = None) -> builtins.list[Task]:
        """Tasks oldest first, optionally only those with `status` / assigned to `agent`.
        Pending and running ones come from the index of open tasks, not from history."""
        return [task for task, _, _ in self.page(status, agent)]

    def page(
        self, status: str | None = None, agent: str | None = None, after: int = 0
    ) -> Generator[tuple[Task, int, int], None, None]:
        """Like `list`, lazily, from the task created after position `after` on: each task as
        served, the bytes of its stored record (what a page of them weighs, about) and its
        creation position (the cursor of the next page). The read transaction lasts as long
        as the iteration: consume it at once."""
        if status is not None and status not in STATUSES:
            return
        with self.space.read() as txn:
            keys: Iterable[bytes]
            if status in ("pending", "running"):
                keys = self._open_keys(txn, agent, after)
            elif agent is not None:
                keys = (key for _, key in _prefixed(txn, self._by_agent, agent, after))
            else:
                keys = _values_after(txn, self._created, after)
            for key in keys:
                raw = txn.get(key, db=self._task)
                if raw is None:  # every index points at a stored task
                    raise LookupError(f"task {key!r} is indexed but not stored")
                record = _stored(raw)
                if status is None or record.task.status == status:
                    yield self._served(record), len(raw), record.position

    def listing(self, agent: str) -> builtins.list[Listed]:
        """Every task of `agent`, the one that changed last first, with its state and when it
        changed, read from the `updated` index (no task decoded): a caller that filters all of
        them (A2A's ListTasks) then reads only the page it serves."""
        prefix = agent.encode() + b"\0"
        if len(prefix) + 8 > _MAX_KEY:
            return []
        found: builtins.list[Listed] = []
        with self.space.read() as txn:
            cursor = txn.cursor(self._updated)
            # on the first key past the agent's (or the last key), then backwards
            if not cursor.set_range(prefix + b"\xff" * 8) and not cursor.last():
                return []
            for key, value in cursor.iterprev():
                if bytes(key[: len(prefix)]) != prefix:
                    if bytes(key) > prefix:
                        continue  # past the agent's last key (a longer name alike)
                    break
                if len(key) == len(prefix) + 8:
                    state, updated_at, task_id = _decode(value)
                    found.append(Listed(task_id, TaskState(state), updated_at))
        return found

    def open_count(self, agent: str, stop_at: int) -> int:
        """How many open tasks the agent has, counting no further than `stop_at`."""
        count = 0
        with self.space.read() as txn:
            for _ in _prefixed(txn, self._open, agent):
                count += 1
                if count >= stop_at:
                    break
        return count

    def open_tasks(self, agent: str) -> builtins.list[Task]:
        """The agent's open tasks in creation order: what a restart delivers again."""
        with self.space.read() as txn:
            return [self._load(txn, key).task for key in self._open_keys(txn, agent)]

    def awaits(self, task_id: str) -> bool:
        """Whether the task's last run ended leaving it open for its client's next message."""
        return self._get(self._awaiting, task_id) is not None

    def turns(self, task_id: str) -> builtins.list[dict[str, Any]]:
        """The turns of a multi-turn task, oldest first (`_awaited`, `_answered`)."""
        key = id_key(task_id)
        if key is None:
            return []
        with self.space.read() as txn:
            return [_decode(raw) for _, raw in self._turns_of(txn, key)]

    def deliverable(self, agent: str) -> builtins.list[Task]:
        """The agent's tasks its worker has to run, in creation order:
        the open ones that do not await their client, each with the input of its client's
        latest message (the task's own input before any): what a restart delivers again."""
        with self.space.read() as txn:
            found = (self._deliverable(txn, key) for key in self._open_keys(txn, agent))
            return [task for task in found if task is not None]

    def deliverable_task(self, task_id: str) -> Task | None:
        """The one task as `deliverable` lists it, or None when its worker has nothing to do
        with it (ended, awaiting its client, unknown)."""
        key = id_key(task_id)
        if key is None:
            return None
        with self.space.read() as txn:
            return self._deliverable(txn, key)

    def _deliverable(self, txn: Txn, key: bytes) -> Task | None:
        """The task, its `input` that of its client's latest message (its own before any)."""
        record = self._record(txn, key)
        if record is None or record.state in s.FINAL_TASK_STATES:
            return None
        if txn.get(key, db=self._awaiting) is not None:
            return None
        raw = txn.get(key, db=self._turn_input)
        task = record.task
        return msgspec.structs.replace(task, input=_decode(raw)) if raw is not None else task

    def _turns_of(self, txn: Txn, key: bytes) -> Iterator[tuple[bytes, bytes]]:
        prefix = key + b"\0"
        cursor = txn.cursor(self._turns)
        if cursor.set_range(prefix):
            for raw_key, value in cursor:
                found = bytes(raw_key)
                if not found.startswith(prefix):
                    return
                if len(found) == len(prefix) + 8:  # not a longer id that starts alike
                    yield found, bytes(value)

    def context_of(self, task_id: str) -> dict[str, Any]:
        """The task's `a2a` map ({} for a task created without one, or unknown)."""
        raw = self._get(self._context, task_id)
        return _decode(raw) if raw is not None else {}

    def canceled_by(self, task_id: str) -> str | None:
        """Who canceled the task ("" when the cancel named nobody); None if it was not."""
        record = self.record(task_id)
        return record.canceled_by if record is not None else None

    def updated_at(self, task_id: str) -> str | None:
        """When the task's state last changed; None for a task it does not know."""
        record = self.record(task_id)
        return record.updated_at if record is not None else None

    def working_on(self, agent: str) -> str | None:
        raw = self._get(self._working_on, agent)
        return _text(raw) if raw is not None else None

    def approval_task_of(self, approval_id: str) -> str | None:
        """The task whose run asked for the approval (kept after it is resolved)."""
        raw = self._get(self._approval_task, approval_id)
        return _text(raw[:-9]) if raw is not None else None

    def pending_approvals(self, task_id: str) -> builtins.list[str]:
        """The approvals the task waits for, in request order."""
        key = id_key(task_id)
        if key is None:
            return []
        with self.space.read() as txn:
            return [approval for _, approval in self._waiting_of(txn, key)]

    def asked_by(self, agent: str, task_id: str) -> builtins.list[str]:
        """The agent's pending approvals that the task's run asked for: those whose request
        names the task, and those the run asked while working on it (journaled before
        requests named tasks), even once the task ended."""
        return [
            r.id
            for r in self.approvals.list()
            if r.agent == agent and (r.task == task_id or self.approval_task_of(r.id) == task_id)
        ]

    def _get(self, db: Any, item_id: str) -> bytes | memoryview | None:
        key = id_key(item_id)
        if key is None:
            return None
        with self.space.read() as txn:
            return txn.get(key, db=db)

    def _open_keys(self, txn: Txn, agent: str | None, after: int = 0) -> builtins.list[bytes]:
        if agent is not None:
            return [key for _, key in _prefixed(txn, self._open, agent, after)]
        every = sorted((key[-8:], value) for key, value in txn.cursor(self._open))
        # all agents' open tasks, by creation position
        return [value for at, value in every if from_u64(at) > after]

    def _load(self, txn: Txn, key: bytes) -> TaskRecord:
        record = self._record(txn, key)
        if record is None:  # every index points at a stored task
            raise LookupError(f"task {key!r} is indexed but not stored")
        return record

    def snapshot(self) -> dict[str, Any]:
        with self.space.read() as txn:
            records = [self._load(txn, key) for _, key in txn.cursor(self._created)]

            def strings(db: Any) -> dict[str, str]:
                return dict(sorted((_text(k), _text(v)) for k, v in txn.cursor(db)))

            waiting: dict[str, builtins.list[str]] = {}
            for link, approval in txn.cursor(self._waiting):  # in request order per task
                waiting.setdefault(_text(link[:-9]), []).append(_text(approval))
            changes = {
                from_u64(k): msgspec.to_builtins(s.decode_changes(v))
                for k, v in txn.cursor(self._changes)
            }
            context = dict(sorted((_text(k), _decode(v)) for k, v in txn.cursor(self._context)))
            approval_task = {
                _text(k): _text(v[:-9]) for k, v in sorted(txn.cursor(self._approval_task))
            }
            working_on = strings(self._working_on)
            awaiting = {_text(k): _decode(v) for k, v in sorted(txn.cursor(self._awaiting))}
            turns: dict[str, builtins.list[Any]] = {}
            for turn_key, turn in txn.cursor(self._turns):  # in order per task
                turns.setdefault(_text(turn_key[:-9]), []).append(_decode(turn))
            turn_input = {_text(k): _decode(v) for k, v in sorted(txn.cursor(self._turn_input))}
        pending: dict[str, builtins.list[str]] = {}
        for record in records:
            if record.task.status == "pending":
                pending.setdefault(record.task.to, []).append(record.task.id)
        return {
            "tasks": [msgspec.to_builtins(r.task) for r in records],
            "states": {r.task.id: r.state.value for r in records},
            "pending": dict(sorted(pending.items())),
            "context": context,
            "canceled": {r.task.id: r.canceled_by for r in records if r.canceled_by is not None},
            "updated": {r.task.id: r.updated_at for r in records},
            "working_on": working_on,
            "approval_task": approval_task,
            "waiting": dict(sorted(waiting.items())),
            "changes": changes,
            "approvals": self.approvals.snapshot(),
            "awaiting": awaiting,
            "turns": dict(sorted(turns.items())),
            "turn_input": turn_input,
        }


def _stored(raw: bytes | memoryview) -> TaskRecord:
    position, fields, state, canceled_by, updated_at = _decode(raw)
    task = Task(
        id=fields["id"],
        from_=fields["from"],
        to=fields["to"],
        status=fields["status"],
        input=fields["input"],
        output=fields["output"],
        created_at=fields["created_at"],
        completed_at=fields["completed_at"],
        progress=fields.get("progress", msgspec.UNSET),
        error=fields.get("error", msgspec.UNSET),
        created_by=fields.get("created_by", msgspec.UNSET),
        from_asserted=fields.get("from_asserted", msgspec.UNSET),
    )
    return TaskRecord(
        task=task,
        state=TaskState(state),
        canceled_by=canceled_by,
        updated_at=updated_at,
        position=position,
    )


def _text(raw: bytes | memoryview) -> str:
    return str(raw, "utf-8")


def _turn_key(task: bytes, position: int) -> bytes:
    return task + b"\0" + u64(position)


def _agent_key(agent: str, position: int) -> bytes:
    return agent.encode() + b"\0" + u64(position)


def _prefixed(txn: Txn, db: Any, agent: str, after: int = 0) -> Iterator[tuple[int, bytes]]:
    """(position, value) of the `agent\0u64(position)` keys of one agent with a position
    over `after`, in order."""
    prefix = agent.encode() + b"\0"
    cursor = txn.cursor(db)
    start = prefix + u64(after + 1) if after else prefix
    if len(prefix) + 8 > _MAX_KEY or not cursor.set_range(start):
        return  # no key of that agent could be stored
    for key, value in cursor:
        if bytes(key[: len(prefix)]) != prefix:
            return
        if len(key) == len(prefix) + 8:
            yield from_u64(key[-8:]), value


def _values_after(txn: Txn, db: Any, after: int) -> Iterator[bytes]:
    """The values of a `u64(position)`-keyed database, from the first key over `after` on."""
    cursor = txn.cursor(db)
    if cursor.set_range(u64(after + 1)):
        for _, value in cursor:
            yield value
