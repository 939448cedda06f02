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
from node.streams.sse import Item
from projections.catalogue import CATALOGUE, PEER_ACKED, TASK_CANCELED

RENAMES = {"agent.errored": "error"}
# Bookkeeping that would only be noise on an operator's stream (mesh acks, several a second).
HIDDEN = frozenset({PEER_ACKED})
# SSE event names of the unified stream, one per catalogued type: no other name is ever sent.
UNIFIED_NAMES = {t: RENAMES.get(t) or t.replace(".", "_") for t in CATALOGUE if t not in HIDDEN}
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
    """The A2A stream: task events only, in DESIGN.md's shapes; nothing ephemeral. `allows` is
    the read models' ownership rule (Owners.allows): an event it refuses is not shown."""

    stateful = False

    def __init__(self, allows: Callable[[Envelope], bool] | None = None) -> None:
        self.allows = allows

    def on_journal(self, envelope: Envelope) -> list[Item]:
        item = a2a_item(envelope, self.allows)
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
    if event.type == "agent.errored":
        data["error"] = _error_text(event.data)
    data["ts"] = event.ts
    data["origin"] = event.origin
    return Item(name, data, envelope.stream, envelope.position)


def _error_text(data: dict[str, Any]) -> str:
    error = data.get("error") or data.get("reason") or data.get("message")
    return error if isinstance(error, str) else "agent error"


def a2a_item(envelope: Envelope, allows: Callable[[Envelope], bool] | None = None) -> Item | None:
    """DESIGN.md's A2A data: task_created {id, from, to, status, created_at}, the rest by id.

    `allows` is the ownership rule (Owners.allows): an event it refuses is not shown."""
    event = envelope.event
    name = A2A_NAMES.get(event.type)
    if name is None or (allows is not None and not allows(envelope)):
        return None
    data = event.data
    task_id = data.get("id")
    if name == "task_created":
        out = {
            "id": task_id,
            "from": data.get("from"),
            "to": envelope.stream,  # the journal it is in (DESIGN: task.created is in `to`'s)
            "status": "pending",
            "created_at": event.ts,
        }
    elif name == "task_progress":
        out = {"id": task_id, "progress": data.get("progress")}
    elif name == "task_completed":
        out = {"id": task_id, "output": data.get("output")}
    elif event.type == TASK_CANCELED:
        out = {"id": task_id, "error": f"canceled by {data.get('operator') or 'an operator'}"}
    elif name == "task_failed":
        out = {"id": task_id, "error": data.get("error")}
    else:
        out = {"id": task_id}
    return Item(name, out, envelope.stream, envelope.position)
