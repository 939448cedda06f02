"""What the A2A protocol shows of a task beyond the spec's task object, folded from journals.

A pure fold like every read model (no I/O, rebuildable from position 0): per task the A2A
context (contextId and the asking message, carried in `task.created`'s `a2a` field), whether
it was canceled and by whom, when its status last changed, and which pending approvals it
waits for. An approval belongs to the task its agent was working on when it asked: a worker
runs one thing at a time, so between `task.started` and that task's end every approval the
agent requests is the task's. While one of them is pending the task is input-required.
"""

from __future__ import annotations

from typing import Any

from eventstore.envelope import Envelope
from projections import catalogue as c
from projections.approvals import APPROVAL_EVENTS
from projections.tasks import TASK_EVENTS

_TASK_END = (c.TASK_COMPLETED, c.TASK_FAILED)


class A2AView:
    name = "a2a"
    handles = TASK_EVENTS | APPROVAL_EVENTS

    def __init__(self) -> None:
        self.context: dict[str, dict[str, Any]] = {}  # task id → its `a2a` data
        self.canceled: dict[str, str] = {}  # task id → operator who canceled it
        self.updated: dict[str, str] = {}  # task id → timestamp of its latest status change
        self.working_on: dict[str, str] = {}  # agent → the task its worker is running
        self.approval_task: dict[str, str] = {}  # approval id → task that asked for it
        self.waiting: dict[str, dict[str, None]] = {}  # task id → its pending approvals

    def apply(self, envelope: Envelope) -> None:
        kind = envelope.event.type
        data = envelope.event.data
        item_id = data.get("id")
        if not isinstance(item_id, str):
            return
        agent, ts = envelope.stream, envelope.event.ts
        if kind.startswith("approval."):
            self._approval(kind, agent, item_id, ts)
            return
        if kind == c.TASK_CREATED:
            if item_id in self.updated:
                return
            context = data.get("a2a")
            if isinstance(context, dict):
                self.context[item_id] = context
        elif item_id not in self.updated:
            return  # an event for a task this journal never created
        elif kind == c.TASK_STARTED:
            self.working_on[agent] = item_id
        elif kind in _TASK_END:
            if self.working_on.get(agent) == item_id:
                del self.working_on[agent]
            self.waiting.pop(item_id, None)
        elif kind == c.TASK_CANCELED:
            operator = data.get("operator")
            self.canceled.setdefault(item_id, operator if isinstance(operator, str) else "")
        self.updated[item_id] = ts

    def _approval(self, kind: str, agent: str, approval_id: str, ts: str) -> None:
        if kind == c.APPROVAL_REQUESTED:
            task_id = self.working_on.get(agent)
            if task_id is None or approval_id in self.approval_task:
                return
            self.approval_task[approval_id] = task_id
            self.waiting.setdefault(task_id, {})[approval_id] = None
            self.updated[task_id] = ts
            return
        task_id = self.approval_task.get(approval_id)
        waiting = self.waiting.get(task_id or "")
        if task_id is None or waiting is None or approval_id not in waiting:
            return
        del waiting[approval_id]
        if not waiting:
            del self.waiting[task_id]
        self.updated[task_id] = ts

    def pending_approvals(self, task_id: str) -> list[str]:
        return list(self.waiting.get(task_id, ()))

    def snapshot(self) -> dict[str, Any]:
        return {
            "context": dict(sorted(self.context.items())),
            "canceled": dict(sorted(self.canceled.items())),
            "updated": dict(sorted(self.updated.items())),
            "working_on": dict(sorted(self.working_on.items())),
            "approval_task": dict(sorted(self.approval_task.items())),
            "waiting": {t: list(a) for t, a in sorted(self.waiting.items())},
        }
