"""Which journal owns each task and approval: the one rule every fold that changes them obeys.

A task belongs to the journal its `task.created` went into (the assigned agent's), an approval
to the journal of its `approval.requested`; the first such event for an id wins. An event that
starts, finishes, cancels, decides, endorses or times out a task or approval, or creates one
under an id another journal owns, is folded only when it sits in the owning journal:
`Projections.apply`
asks `allows` before any read model sees it. So a peer's journal can never cancel, finish or
decide what another journal owns. Grants need no entry here: each is keyed by its journal.
"""

from __future__ import annotations

from typing import Any

from eventstore.envelope import Envelope
from projections import catalogue as c
from projections.disk import Space, Txn, key_of

CREATES = {c.TASK_CREATED: "task", c.APPROVAL_REQUESTED: "approval"}
CHANGES = {
    c.TASK_STARTED: "task",
    c.TASK_PROGRESS: "task",
    c.TASK_COMPLETED: "task",
    c.TASK_FAILED: "task",
    c.TASK_CANCELED: "task",
    c.TASK_AWAITING: "task",
    c.TASK_MESSAGE: "task",
    c.APPROVAL_DECIDED: "approval",
    c.APPROVAL_TIMED_OUT: "approval",
    c.APPROVAL_ABANDONED: "approval",
    c.APPROVAL_ENDORSED: "approval",
}
GUARDED = frozenset(CREATES) | frozenset(CHANGES)


class Owners:
    """On disk (projections/disk.py): `<kind>\0<id>` → the owning journal's name."""

    name = "owners"
    handles = frozenset(CREATES)
    guarded = GUARDED
    space: Space

    def bind(self, space: Space) -> None:
        self.space = space
        self._owner = space.db(self.name, "owner")

    def fold(self, txn: Txn, envelope: Envelope) -> None:
        kind = CREATES.get(envelope.event.type)
        item_id = envelope.event.data.get("id")
        if kind is not None and isinstance(item_id, str):
            txn.put(_key(kind, item_id), envelope.stream.encode(), db=self._owner, overwrite=False)

    def allows(self, envelope: Envelope, txn: Txn | None = None) -> bool:
        """False when `envelope` would change a task or approval another journal owns (as
        `txn` sees it: the writer's own, inside a fold; otherwise a read of what is stored)."""
        event = envelope.event
        kind = CREATES.get(event.type) or CHANGES.get(event.type)
        if kind is None:
            return True
        item_id = event.data.get("id")
        if not isinstance(item_id, str):
            return True  # no id: every fold ignores it anyway
        owner = self._get(kind, item_id, txn)
        return owner is None or owner == envelope.stream

    def owner_of(self, kind: str, item_id: str) -> str | None:
        return self._get(kind, item_id, None)

    def _get(self, kind: str, item_id: str, txn: Txn | None) -> str | None:
        if txn is None:
            with self.space.read() as read:
                raw = read.get(_key(kind, item_id), db=self._owner)
        else:
            raw = txn.get(_key(kind, item_id), db=self._owner)
        return raw.decode() if raw is not None else None

    def snapshot(self) -> dict[str, Any]:
        owners: dict[str, dict[str, str]] = {"approval": {}, "task": {}}
        with self.space.read() as txn:
            for key, value in txn.cursor(self._owner):
                kind, item_id = key.split(b"\0", 1)
                owners[kind.decode()][item_id.decode("utf-8", "replace")] = value.decode()
        return owners


def _key(kind: str, item_id: str) -> bytes:
    return kind.encode() + b"\0" + key_of(item_id, len(kind) + 1)
