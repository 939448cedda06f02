"""A2A tasks, folded from the task.* events in the journal of each task's assigned agent.

Status follows the events: created → pending; started or progress → running; completed and
failed are final (later events for a final task are ignored); canceled (A2A CancelTask) is
shown as failed with `error` "canceled by <operator>". `created_at` and `completed_at`
are the timestamps of the creating and the finishing event. The first `task.created` of an
id wins; any other event counts only in the journal that created the task.

On disk (projections/disk.py), so the heap holds none of history's tasks:
`task`      id → (creation position, the Task) in msgpack;
`created`   u64(position) → id, every task in creation order;
`by_agent`  agent\0u64(position) → id, one agent's tasks in creation order;
`open`      agent\0u64(position) → id, the pending and running ones only: what the runtime
            delivers again after a restart and what "pending" lists, without walking history.
An id that cannot be an LMDB key (empty, or over 400 bytes) is no task: its events are ignored.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Iterator
from typing import Any, Literal

import msgspec

from eventstore.envelope import Envelope
from projections import catalogue as c
from projections.disk import Space, Txn, from_u64, key_of, u64

STATUSES = ("pending", "running", "completed", "failed")
Status = Literal["pending", "running", "completed", "failed"]
FINAL = ("completed", "failed")
OPEN = ("pending", "running")
TASK_EVENTS = frozenset(
    {
        c.TASK_CREATED,
        c.TASK_STARTED,
        c.TASK_PROGRESS,
        c.TASK_COMPLETED,
        c.TASK_FAILED,
        c.TASK_CANCELED,
    }
)
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


_encode = msgspec.msgpack.Encoder().encode
# untyped: an input or output from a journal may hold maps a typed decode would refuse
_decode = msgspec.msgpack.Decoder().decode


def id_key(item_id: str) -> bytes | None:
    """The id as a key with room for a position after it (the A2A view's approval index); a
    longer one as its digest (`key_of`); None for an empty id, which names nothing."""
    return key_of(item_id, 9) if item_id else None


class Tasks:
    name = "tasks"
    handles = TASK_EVENTS
    space: Space

    def bind(self, space: Space) -> None:
        self.space = space
        self._task = space.db(self.name, "task")
        self._created = space.db(self.name, "created")
        self._by_agent = space.db(self.name, "by_agent")
        self._open = space.db(self.name, "open")

    # ------------------------------------------------------------------ the fold
    def fold(self, txn: Txn, envelope: Envelope) -> None:
        kind = envelope.event.type
        if not kind.startswith("task."):
            return
        data = envelope.event.data
        task_id = data.get("id")
        if not isinstance(task_id, str):
            return
        key = id_key(task_id)
        if key is None:
            return
        if kind == c.TASK_CREATED:
            if txn.get(key, db=self._task) is not None:
                return
            raw_input = data.get("input")
            task = Task(
                id=task_id,
                from_=str(data.get("from", "")),
                to=envelope.stream,
                status="pending",
                input=raw_input if isinstance(raw_input, dict) else {},
                created_at=envelope.event.ts,
            )
            position = envelope.position
            txn.put(key, _encode((position, task)), db=self._task)
            txn.put(u64(position), key, db=self._created)
            txn.put(_agent_key(task.to, position), key, db=self._by_agent)
            txn.put(_agent_key(task.to, position), key, db=self._open)
            return
        raw = txn.get(key, db=self._task)
        if raw is None:
            return
        position, task = _stored(raw)
        if task.to != envelope.stream or task.status in FINAL:
            return
        if kind in (c.TASK_STARTED, c.TASK_PROGRESS):
            task.status = "running"
            if kind == c.TASK_PROGRESS and "progress" in data:
                task.progress = data["progress"]
        elif kind == c.TASK_COMPLETED:
            output = data.get("output")
            task.status = "completed"
            task.output = output if isinstance(output, dict) else {}
            task.completed_at = envelope.event.ts
        elif kind == c.TASK_FAILED:
            task.status = "failed"
            task.error = str(data.get("error", ""))
            task.completed_at = envelope.event.ts
        elif kind == c.TASK_CANCELED:  # the spec's statuses have no "canceled": a failure
            task.status = "failed"
            task.error = f"canceled by {data.get('operator') or 'an operator'}"
            task.completed_at = envelope.event.ts
        else:
            return  # a task.* type it does not know
        txn.put(key, _encode((position, task)), db=self._task)
        if task.status in FINAL:
            txn.delete(_agent_key(task.to, position), db=self._open)

    # ------------------------------------------------------------------ reads
    def get(self, task_id: str) -> Task | None:
        key = id_key(task_id)
        if key is None:
            return None
        with self.space.read() as txn:
            raw = txn.get(key, db=self._task)
        return _stored(raw)[1] if raw is not None else None

    def list(self, status: str | None = None, agent: str | None = None) -> builtins.list[Task]:
        """Tasks oldest first, optionally only those with `status` / assigned to `agent`.
        Pending and running ones come from the index of open tasks, not from history."""
        if status is not None and status not in STATUSES:
            return []
        with self.space.read() as txn:
            keys: Iterable[bytes]
            if status in OPEN:
                keys = self._open_keys(txn, agent)
            elif agent is not None:
                keys = (key for _, key in _prefixed(txn, self._by_agent, agent))
            else:
                keys = txn.cursor(self._created).iternext(keys=False, values=True)
            found = [self._load(txn, key) for key in keys]
        return [t for t in found if status is None or t.status == status]

    def open_tasks(self, agent: str) -> builtins.list[Task]:
        """The agent's pending and running tasks in creation order: what a restart delivers
        again."""
        with self.space.read() as txn:
            return [self._load(txn, key) for key in self._open_keys(txn, agent)]

    def _open_keys(self, txn: Txn, agent: str | None) -> builtins.list[bytes]:
        if agent is not None:
            return [key for _, key in _prefixed(txn, self._open, agent)]
        every = sorted((key[-8:], value) for key, value in txn.cursor(self._open))
        return [value for _, value in every]  # all agents' open tasks, by creation position

    def _load(self, txn: Txn, key: bytes) -> Task:
        raw = txn.get(key, db=self._task)
        if raw is None:  # every index points at a stored task
            raise LookupError(f"task {key!r} is indexed but not stored")
        return _stored(raw)[1]

    def snapshot(self) -> dict[str, Any]:
        with self.space.read() as txn:
            tasks = [self._load(txn, key) for _, key in txn.cursor(self._created)]
        pending: dict[str, builtins.list[str]] = {}
        for task in tasks:
            if task.status == "pending":
                pending.setdefault(task.to, []).append(task.id)
        return {
            "tasks": [msgspec.to_builtins(t) for t in tasks],
            "pending": dict(sorted(pending.items())),
        }


def _stored(raw: bytes | memoryview) -> tuple[int, Task]:
    position, fields = _decode(raw)
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
    )
    return position, task


def _agent_key(agent: str, position: int) -> bytes:
    return agent.encode() + b"\0" + u64(position)


def _prefixed(txn: Txn, db: Any, agent: str) -> Iterator[tuple[int, bytes]]:
    """(position, value) of the `agent\0u64(position)` keys of one agent, in order."""
    prefix = agent.encode() + b"\0"
    cursor = txn.cursor(db)
    if len(prefix) + 8 > _MAX_KEY or not cursor.set_range(prefix):
        return  # no key of that agent could be stored
    for key, value in cursor:
        if bytes(key[: len(prefix)]) != prefix:
            return
        if len(key) == len(prefix) + 8:
            yield from_u64(key[-8:]), value
