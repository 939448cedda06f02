"""Journaled events as SSE events: the unified/per-agent stream's names and the A2A stream's.

The unified stream shows every journaled event, so an operator sees logs, findings, approvals,
grants and tasks live, not only the spec's runtime events: the SSE name is the journal type with
`.` → `_` (`approval.requested` → `approval_requested`), except `agent.errored`, which is the
spec's `error` event. The data is the event's own data plus `agent` (the journal), `ts` and
`origin` (the writing node).
"""

from __future__ import annotations

from typing import Any

from eventstore.envelope import Envelope
from node.streams.agui import is_agui_event
from node.streams.sse import Item

RENAMES = {"agent.errored": "error"}
# Bookkeeping that would only be noise on an operator's stream (mesh acks, several a second).
HIDDEN = frozenset({"peer.acked"})
A2A_NAMES = {
    "task.created": "task_created",
    "task.started": "task_started",
    "task.progress": "task_progress",
    "task.completed": "task_completed",
    "task.failed": "task_failed",
    "task.canceled": "task_failed",  # the spec has no canceled state; REST shows it as failed
}


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
    """The A2A stream: task events only, in DESIGN.md's shapes; nothing ephemeral."""

    stateful = False

    def on_journal(self, envelope: Envelope) -> list[Item]:
        item = a2a_item(envelope)
        return [item] if item is not None else []

    def on_runtime(self, name: str, data: dict[str, Any], agent: str | None) -> list[Item]:
        return []


def unified_name(event_type: str) -> str:
    return RENAMES.get(event_type) or event_type.replace(".", "_")


def unified_item(envelope: Envelope) -> Item | None:
    event = envelope.event
    if event.type in HIDDEN:
        return None
    data: dict[str, Any] = {**event.data, "agent": envelope.stream}
    if event.type == "agent.errored":
        data["error"] = _error_text(event.data)
    data["ts"] = event.ts
    data["origin"] = event.origin
    return Item(unified_name(event.type), data, envelope.stream, envelope.position)


def _error_text(data: dict[str, Any]) -> str:
    error = data.get("error") or data.get("reason") or data.get("message")
    return error if isinstance(error, str) else "agent error"


def a2a_item(envelope: Envelope) -> Item | None:
    """DESIGN.md's A2A data: task_created {id, from, to, status, created_at}, the rest by id."""
    event = envelope.event
    name = A2A_NAMES.get(event.type)
    if name is None:
        return None
    data = event.data
    task_id = data.get("id")
    if name == "task_created":
        out = {
            "id": task_id,
            "from": data.get("from"),
            "to": data.get("to", envelope.stream),
            "status": "pending",
            "created_at": event.ts,
        }
    elif name == "task_progress":
        out = {"id": task_id, "progress": data.get("progress")}
    elif name == "task_completed":
        out = {"id": task_id, "output": data.get("output")}
    elif event.type == "task.canceled":
        out = {"id": task_id, "error": f"canceled by {data.get('operator') or 'an operator'}"}
    elif name == "task_failed":
        out = {"id": task_id, "error": data.get("error")}
    else:
        out = {"id": task_id}
    return Item(name, out, envelope.stream, envelope.position)
