"""A2A tasks, folded from the task.* events in the journal of each task's assigned agent.

Status follows the events: created → pending; started or progress → running; completed and
failed are final (later events for a final task are ignored); canceled (A2A CancelTask) is
shown as failed with `error` "canceled by <operator>". `created_at` and `completed_at`
are the timestamps of the creating and the finishing event.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from eventstore.envelope import Envelope
from projections import catalogue as c

STATUSES = ("pending", "running", "completed", "failed")
Status = Literal["pending", "running", "completed", "failed"]
FINAL = ("completed", "failed")
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


class Tasks:
    name = "tasks"
    handles = TASK_EVENTS

    def __init__(self) -> None:
        self.tasks: dict[str, Task] = {}
        # agent → ids of its pending tasks in creation order (what the runtime delivers next)
        self._pending: dict[str, dict[str, None]] = {}

    def apply(self, envelope: Envelope) -> None:
        kind = envelope.event.type
        if not kind.startswith("task."):
            return
        data = envelope.event.data
        task_id = data.get("id")
        if not isinstance(task_id, str):
            return
        if kind == c.TASK_CREATED:
            if task_id in self.tasks:
                return
            raw_input = data.get("input")
            self.tasks[task_id] = Task(
                id=task_id,
                from_=str(data.get("from", "")),
                to=envelope.stream,
                status="pending",
                input=raw_input if isinstance(raw_input, dict) else {},
                created_at=envelope.event.ts,
            )
            self._pending.setdefault(envelope.stream, {})[task_id] = None
            return
        task = self.tasks.get(task_id)
        if task is None or task.to != envelope.stream or task.status in FINAL:
            return
        if kind in (c.TASK_STARTED, c.TASK_PROGRESS):
            self._leave_pending(task)
            task.status = "running"
            if kind == c.TASK_PROGRESS and "progress" in data:
                task.progress = data["progress"]
        elif kind == c.TASK_COMPLETED:
            self._leave_pending(task)
            output = data.get("output")
            task.status = "completed"
            task.output = output if isinstance(output, dict) else {}
            task.completed_at = envelope.event.ts
        elif kind == c.TASK_FAILED:
            self._leave_pending(task)
            task.status = "failed"
            task.error = str(data.get("error", ""))
            task.completed_at = envelope.event.ts
        elif kind == c.TASK_CANCELED:  # the spec's statuses have no "canceled": a failure
            self._leave_pending(task)
            task.status = "failed"
            task.error = f"canceled by {data.get('operator') or 'an operator'}"
            task.completed_at = envelope.event.ts

    def _leave_pending(self, task: Task) -> None:
        waiting = self._pending.get(task.to)
        if waiting is None:
            return
        waiting.pop(task.id, None)
        if not waiting:
            del self._pending[task.to]

    def get(self, task_id: str) -> Task | None:
        return self.tasks.get(task_id)

    def list(self, status: str | None = None, agent: str | None = None) -> list[Task]:
        """Tasks oldest first, optionally only those with `status` / assigned to `agent`."""
        if status == "pending":
            ids = self._pending.get(agent, {}) if agent is not None else None
            if ids is not None:
                return [self.tasks[i] for i in ids]
        return [
            t
            for t in self.tasks.values()
            if (status is None or t.status == status) and (agent is None or t.to == agent)
        ]

    def snapshot(self) -> dict[str, Any]:
        return {
            "tasks": [msgspec.to_builtins(t) for t in self.tasks.values()],
            "pending": {a: list(ids) for a, ids in sorted(self._pending.items())},
        }
