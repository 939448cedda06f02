"""A2A task commands: the one writer of task.* events, each in the journal of the assigned agent.

The HTTP API, the A2A and AG-UI endpoints and agents (through the host) create tasks; the
runtime reports start, progress and the outcome through the same methods. State checks read
the projection, so a command that does not fit the task's status (completing a failed task)
is a 409.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from aiohttp import web

from eventstore.envelope import Envelope
from eventstore.store import NewEvent
from node.context import NodeContext
from node.runtime.limits import MAX_EVENT_BYTES, MAX_PAYLOAD_BYTES
from node.services.journal import ensure_local
from node.web.http import Problem
from projections import catalogue as c
from projections.tasks import Task, Tasks


class TaskService:
    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx
        # ids with a final event being appended: a racing complete/fail must not add another
        self._finishing: set[str] = set()
        # ids with a client's message being appended: one message per turn
        self._answering: set[str] = set()
        # tasks being created per agent, for the open-tasks cap
        self._creating: dict[str, int] = {}
        # a placed agent's new task is answered once the mesh's stream holds it (503 if not in
        # time): node/placement/manager.py sets it with the NATS transport
        self.confirm: Callable[[str], Awaitable[None]] | None = None

    @property
    def projection(self) -> Tasks:
        return self.ctx.projections.get(Tasks)

    async def create(
        self,
        from_agent: str,
        to: str,
        input: dict[str, Any],
        *,
        a2a: dict[str, Any] | None = None,
        caller: str | None = None,
        preceded_by: Callable[[str], list[NewEvent]] | None = None,
        task_id: str | None = None,
    ) -> dict[str, Any]:
        """A new pending task for `to`, which must be hosted here (404 unknown, 409 elsewhere).

        `a2a` (optional) is what the A2A/AG-UI protocol endpoints keep with the task (its
        contextId and the message that asked for it); it rides in the same event. `caller`
        is the API token that asked (None: an agent of this node, named by `from_agent`).
        `preceded_by(task_id)`: events journaled in the same write, just before the task's
        (an A2A push config sent with the message, so its first change is notified too).
        `task_id`: the id an agent's recorded `create-task` derives from its call's key; when
        that task exists already (the call is made again after an interruption), it is the
        answer, and nothing is created twice.
        """
        if task_id is not None and (existing := self.projection.get(task_id)) is not None:
            if existing.to == to and existing.from_ == from_agent:
                return {"id": task_id, "status": existing.status, "created_at": existing.created_at}
            raise Problem(409, f"task {task_id} exists already, for another caller")
        ensure_local(self.ctx, to)
        if self.ctx.config.agent(to) is None:
            raise Problem(404, f"no agent named {to!r} is hosted on this node")
        cap = self.ctx.config.node.max_open_tasks_per_agent
        creating = self._creating.get(to, 0)  # appends not yet folded count too
        if creating + self.projection.open_count(to, cap) >= cap:
            raise Problem(
                429,
                f"agent {to!r} has {cap} open tasks, this node's limit "
                "(node.max_open_tasks_per_agent); retry once some have finished",
            )
        task_id = task_id or str(uuid.uuid4())
        created = c.TaskCreated(
            id=task_id, from_=from_agent, to=to, input=input, a2a=a2a, caller=caller
        )
        kind, data = c.event_of(created)
        # A journal event must stay replicable (under the peers' push limit).
        for what, value, limit in (
            ("the task input", input, MAX_PAYLOAD_BYTES),
            ("the task with its A2A message", data, MAX_EVENT_BYTES),
        ):
            size = len(msgspec.json.encode(value))
            if size > limit:
                raise Problem(413, f"{what} is {size} bytes as JSON; the limit is {limit} bytes")
        self._creating[to] = creating + 1
        try:
            if preceded_by is None:
                envelope = await self.ctx.store.append(to, kind, data)
            else:
                before = preceded_by(task_id)
                written = await self.ctx.store.append_many([*before, NewEvent(to, kind, data)])
                envelope = written[-1]
        finally:
            if self._creating[to] > 1:
                self._creating[to] -= 1
            else:
                del self._creating[to]
        if self.confirm is not None:
            await self.confirm(to)
        return {"id": task_id, "status": "pending", "created_at": envelope.event.ts}

    async def cancel(self, task_id: str, operator: str) -> Envelope:
        """pending/running → canceled (`task.canceled`): never delivered again; a result the
        agent still reports for it is ignored, since the task is already final."""
        task = self._check(task_id, ("pending", "running"), "cancel")
        envelope = await self._finish(task_id, c.TaskCanceled(id=task_id, operator=operator))
        if self.confirm is not None:
            await self.confirm(task.to)
        return envelope

    async def start(self, task_id: str) -> Envelope:
        """pending → running; a running task is started again when it is delivered again
        after a restart (delivery is at least once)."""
        self._check(task_id, ("pending", "running"), "start")
        return await self._append(task_id, c.TaskStarted(id=task_id))

    async def progress(self, task_id: str, progress: dict[str, Any] | str) -> Envelope:
        """An intermediate report; a pending task becomes running."""
        self._check(task_id, ("pending", "running"), "report progress on")
        return await self._append(task_id, c.TaskProgress(id=task_id, progress=progress))

    async def complete(self, task_id: str, output: dict[str, Any]) -> Envelope:
        self._check(task_id, ("pending", "running"), "complete")
        return await self._finish(task_id, c.TaskCompleted(id=task_id, output=output))

    async def fail(self, task_id: str, error: str) -> Envelope:
        self._check(task_id, ("pending", "running"), "fail")
        return await self._finish(task_id, c.TaskFailed(id=task_id, error=error))

    async def awaits(
        self,
        task_id: str,
        *,
        input_required: bool,
        message: str | None,
        reply: dict[str, Any],
    ) -> Envelope:
        """The agent's run of a task ended without ending it: the task awaits its client's
        next message (docs/agents.md, "Multi-turn tasks")."""
        self._check(task_id, ("running",), "leave open")
        awaiting = c.TaskAwaiting(
            id=task_id, input_required=input_required, message=message, reply=reply
        )
        return await self._append(task_id, awaiting)

    async def message(
        self, task_id: str, input: dict[str, Any], a2a: dict[str, Any] | None, operator: str
    ) -> Envelope:
        """The client's next message to a task that awaits one (409 when it does not, or has
        had MAX_TURNS already); the agent's next run of the task gets `input`."""
        task = self._check(task_id, ("running",), "send a message to")
        if not self.projection.awaits(task_id) or task_id in self._answering:
            raise Problem(409, f"task {task_id!r} is not awaiting a message from its client")
        if len(self.projection.turns(task_id)) >= MAX_TURNS:
            raise Problem(
                409, f"task {task_id!r} has had {MAX_TURNS} turns, the most one task may have"
            )
        kind, data = c.event_of(c.TaskMessage(id=task_id, input=input, a2a=a2a, operator=operator))
        size = len(msgspec.json.encode(data))
        if size > MAX_EVENT_BYTES:
            limit = MAX_EVENT_BYTES
            raise Problem(413, f"the message is {size} bytes as JSON; the limit is {limit}")
        self._answering.add(task_id)  # a second message racing this one is refused
        try:
            envelope = await self.ctx.store.append(task.to, kind, data)
        finally:
            self._answering.discard(task_id)
        if self.confirm is not None:
            await self.confirm(task.to)
        return envelope

    def get(self, task_id: str) -> Task:
        task = self.projection.get(task_id)
        if task is None:
            raise Problem(404, f"no task with id {task_id!r}")
        return task

    def list(self, status: str | None = None, agent: str | None = None) -> list[Task]:
        return self.projection.list(status, agent)

    def page(self, query: TaskQuery) -> TaskPage:
        """Tasks after the cursor, oldest first, until `limit` of them or about `max_bytes`
        (at least one); an input, output or progress over ELIDE_BYTES is left out (named in
        `elided`), for the single-task read to serve."""
        tasks: list[Task] = []
        size, cursor = 0, query.after
        if query.limit == 0:
            return TaskPage(tasks, None)
        # closed on return: the projection's read transaction ends with it
        with contextlib.closing(
            self.projection.page(query.status, query.agent, query.after)
        ) as found:
            for task, stored, position in found:
                if len(tasks) >= query.limit or (tasks and size >= query.max_bytes):
                    return TaskPage(tasks, cursor)  # one more follows
                if stored > ELIDE_BYTES:
                    stored -= _elide(task)
                tasks.append(task)
                size += stored
                cursor = position
        return TaskPage(tasks, None)

    def _check(self, task_id: str, allowed: tuple[str, ...], verb: str) -> Task:
        task = self.get(task_id)
        ensure_local(self.ctx, task.to)
        if task.status not in allowed or task_id in self._finishing:
            status = "finishing" if task_id in self._finishing else task.status
            raise Problem(409, f"cannot {verb} task {task_id!r}: it is {status}")
        return task

    async def _append(self, task_id: str, payload: c.Payload) -> Envelope:
        """In the journal of the task's agent (its owner), built from the catalogue's Struct."""
        task = self.get(task_id)
        return await self.ctx.store.append(task.to, *c.event_of(payload))

    async def _finish(self, task_id: str, payload: c.Payload) -> Envelope:
        self._finishing.add(task_id)
        try:
            return await self._append(task_id, payload)
        finally:
            self._finishing.discard(task_id)


def cancellations(tasks: Tasks, agent: str, operator: str | None) -> list[NewEvent]:
    """`task.canceled` for every open task of `agent`, for a caller that journals them in one
    write with other events (an agent's removal); built here, where task events are."""
    return [
        NewEvent(agent, *c.event_of(c.TaskCanceled(id=task.id, operator=operator)))
        for task in tasks.open_tasks(agent)
    ]


TASKS = web.AppKey("tasks", TaskService)
# turns of one multi-turn task (the agent's and its client's): each is an event of its journal
MAX_TURNS = 200
# in a list of tasks, an input, output or progress larger than this (as msgpack, about its
# JSON size) is left out: 800 tasks of 60 KB made a 45 MiB body
ELIDE_BYTES = 4096
_ELIDABLE = ("input", "output", "progress")
_LEFT_OUT: dict[str, Any] = {"input": {}, "output": None, "progress": msgspec.UNSET}
_size = msgspec.msgpack.Encoder().encode


@dataclass(frozen=True)
class TaskQuery:
    status: str | None
    agent: str | None
    after: int  # the cursor: the creation position of the last task of the previous page
    limit: int
    max_bytes: int


@dataclass(frozen=True)
class TaskPage:
    tasks: list[Task]
    next_cursor: int | None  # None: this is the last page


def _elide(task: Task) -> int:
    """Leave out the task's large values; how many bytes that saved."""
    saved = 0
    elided = []
    for field in _ELIDABLE:
        value = getattr(task, field)
        if value is None or value is msgspec.UNSET:
            continue
        size = len(_size(value))
        if size > ELIDE_BYTES:
            setattr(task, field, _LEFT_OUT[field])
            elided.append(field)
            saved += size
    if elided:
        task.elided = elided
    return saved
