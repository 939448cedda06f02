"""Which journal owns each task and approval: the one rule every fold that changes them obeys.

A task belongs to the journal its `task.created` went into (the assigned agent's), an approval
to the journal of its `approval.requested`; the first such event for an id wins. An event that
starts, finishes, cancels, decides or times out a task or approval, or creates one under an id
another journal owns, is folded only when it sits in the owning journal: `Projections.apply`
asks `allows` before any read model sees it. So a peer's journal can never cancel, finish or
decide what another journal owns. Grants need no entry here: each is keyed by its journal.
"""

from __future__ import annotations

from typing import Any

from eventstore.envelope import Envelope
from projections import catalogue as c

CREATES = {c.TASK_CREATED: "task", c.APPROVAL_REQUESTED: "approval"}
CHANGES = {
    c.TASK_STARTED: "task",
    c.TASK_PROGRESS: "task",
    c.TASK_COMPLETED: "task",
    c.TASK_FAILED: "task",
    c.TASK_CANCELED: "task",
    c.APPROVAL_DECIDED: "approval",
    c.APPROVAL_TIMED_OUT: "approval",
}
GUARDED = frozenset(CREATES) | frozenset(CHANGES)


class Owners:
    name = "owners"
    handles = frozenset(CREATES)

    def __init__(self) -> None:
        self.owner: dict[str, dict[str, str]] = {"task": {}, "approval": {}}

    def apply(self, envelope: Envelope) -> None:
        kind = CREATES.get(envelope.event.type)
        item_id = envelope.event.data.get("id")
        if kind is not None and isinstance(item_id, str):
            self.owner[kind].setdefault(item_id, envelope.stream)

    def allows(self, envelope: Envelope) -> bool:
        """False when `envelope` would change a task or approval another journal owns."""
        event = envelope.event
        kind = CREATES.get(event.type) or CHANGES.get(event.type)
        if kind is None:
            return True
        item_id = event.data.get("id")
        if not isinstance(item_id, str):
            return True  # no id: every fold ignores it anyway
        owner = self.owner[kind].get(item_id)
        return owner is None or owner == envelope.stream

    def owner_of(self, kind: str, item_id: str) -> str | None:
        return self.owner[kind].get(item_id)

    def snapshot(self) -> dict[str, Any]:
        return {k: dict(sorted(v.items())) for k, v in sorted(self.owner.items())}
