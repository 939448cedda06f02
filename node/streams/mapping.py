"""Journaled events as SSE events: the unified/per-agent stream's names and the A2A stream's.

The unified stream shows every journaled event, so an operator sees logs, findings, approvals,
grants and tasks live, not only the spec's runtime events: the SSE name is the journal type with
`.` → `_` (`approval.requested` → `approval_requested`), except `agent.errored`, which is the
spec's `error` event. The data is the event's own data plus `agent` (the journal), `ts` and
`origin` (the writing node).

Nothing a peer writes shapes a frame: the `event:` name comes from the event catalogue (a type
it does not list is not shown; the sync receiver refuses such types anyway), the `id:` is the
journal position this node assigned, and the data line is JSON. On the A2A stream an event that
would change a task another journal owns is not shown (projections/ownership.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from eventstore.envelope import Envelope
from node.agui.stream import is_agui_event
from node.streams.frames import Item
from projections import catalogue as c
from projections.catalogue import CATALOGUE, DELIVERY_PROGRESS, PEER_ACKED
from projections.states import TaskChanged, TaskState

RENAMES = {c.AGENT_ERRORED: "error"}
# Bookkeeping that would only be noise on an operator's stream (mesh acks, several a second;
# the outbox's delivered marks, docs/notifications.md).
HIDDEN = frozenset({PEER_ACKED, DELIVERY_PROGRESS})
# SSE event names of the unified stream, one per catalogued type: no other name is ever sent.
UNIFIED_NAMES = {t: RENAMES.get(t) or t.replace(".", "_") for t in CATALOGUE if t not in HIDDEN}
# What the A2A stream may name a frame (DESIGN.md's shapes; the spec has no canceled state, so a
# cancel is `task_failed`, as REST shows it).
A2A_NAMES = frozenset(
    {"task_created", "task_started", "task_progress", "task_completed", "task_failed"}
)
TaskChanges = Callable[[Envelope], list[TaskChanged]]


class UnifiedChannel:
    """The unified and per-agent streams: every journaled event (bar bookkeeping) and every
    runtime event that is not AG-UI's own, with `agent` added."""

    stateful = False

    def on_journal(self, envelope: Envelope) -> list[Item]:
        item = unified_item(envelope)
        return [item] if item is not None else []

    def on_runtime(self, name: str, data: dict[str, Any], agent: str | None) -> list[Item]:
        if is_agui_event(name):
            return []
        if agent is not None and "agent" not in data:
            data = {"agent": agent, **data}
        return [Item(name, data, agent)]


class A2AChannel:
    """The A2A stream: what task events changed (`changes`, the tasks read model's), in
    DESIGN.md's shapes; nothing ephemeral, nothing the one state machine refused."""

    stateful = False

    def __init__(self, changes: TaskChanges) -> None:
        self.changes = changes

    def on_journal(self, envelope: Envelope) -> list[Item]:
        item = a2a_item(envelope, self.changes)
        return [item] if item is not None else []

    def on_runtime(self, name: str, data: dict[str, Any], agent: str | None) -> list[Item]:
        return []


def unified_name(event_type: str) -> str | None:
    return UNIFIED_NAMES.get(event_type)


def unified_item(envelope: Envelope) -> Item | None:
    event = envelope.event
    name = UNIFIED_NAMES.get(event.type)
    if name is None:
        return None
    data: dict[str, Any] = {**event.data, "agent": envelope.stream}
    if event.type == c.AGENT_ERRORED:
        errored = c.payload_of(envelope)
        error = errored.error if isinstance(errored, c.AgentErrored) else ""
        data["error"] = error or "agent error"
    data["ts"] = event.ts
    data["origin"] = event.origin
    return Item(name, data, envelope.stream, envelope.position)


def a2a_item(envelope: Envelope, changes: TaskChanges) -> Item | None:
    """DESIGN.md's A2A data: task_created {id, from, to, status, created_at}, the rest by id."""
    for change in changes(envelope):
        found = _a2a_frame(change, envelope)
        if found is not None:
            name, data = found
            return Item(name, data, envelope.stream, envelope.position)
    return None


def _a2a_frame(change: TaskChanged, envelope: Envelope) -> tuple[str, dict[str, Any]] | None:
    payload, task_id = c.payload_of(envelope), change.task
    if change.created:
        sender = payload.from_ if isinstance(payload, c.TaskCreated) else ""
        return "task_created", {
            "id": task_id,
            "from": sender,
            "to": change.agent,  # the journal it is in (DESIGN: task.created is in `to`'s)
            "status": "pending",
            "created_at": envelope.event.ts,
        }
    if isinstance(payload, c.TaskProgress):
        return "task_progress", {"id": task_id, "progress": payload.progress}
    if change.after is TaskState.RUNNING and change.before is TaskState.PENDING:
        return "task_started", {"id": task_id}
    if isinstance(payload, c.TaskCompleted):
        return "task_completed", {"id": task_id, "output": payload.output}
    if isinstance(payload, c.TaskCanceled):
        by = payload.operator or "an operator"
        return "task_failed", {"id": task_id, "error": f"canceled by {by}"}
    if isinstance(payload, c.TaskFailed):
        return "task_failed", {"id": task_id, "error": payload.error}
    return None  # to or from input-required: the approval events say it
