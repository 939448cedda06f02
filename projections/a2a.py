"""What the A2A protocol shows of a task beyond the spec's task object, folded from journals.

A pure fold like every read model (no I/O, rebuildable from position 0): per task the A2A
context (contextId and the asking message, carried in `task.created`'s `a2a` field), whether
it was canceled and by whom, when its status last changed, and which pending approvals it
waits for. An approval belongs to the task its agent was working on when it asked: a worker
runs one thing at a time, so between `task.started` and that task's end every approval the
agent requests is the task's. While one of them is pending the task is input-required.

Events for a task id no journal created are ignored; which journal may change a task or an
approval is the ownership rule's (projections/ownership.py), applied before this fold.

On disk (projections/disk.py), nothing in the heap:
`updated`        task id → timestamp of its latest status change (every task created)
`context`        task id → its `a2a` map in msgpack (only tasks that carried one)
`canceled`       task id → the operator who canceled it ("" when none was named)
`working_on`     agent → the task its worker is running
`approval_task`  approval id → the task that asked for it, as `task id\0u64(request position)`
`waiting`        `task id\0u64(request position)` → approval id: a task's pending approvals
                 in request order (the value of `approval_task` is the key here)
Ids that cannot be LMDB keys (empty, or over 400 bytes) are ignored, as non-string ids are.
"""

from __future__ import annotations

from typing import Any

import msgspec

from eventstore.envelope import Envelope
from projections import catalogue as c
from projections.approvals import APPROVAL_EVENTS
from projections.disk import Space, Txn, u64
from projections.tasks import TASK_EVENTS, id_key

_TASK_END = (c.TASK_COMPLETED, c.TASK_FAILED)
_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder().decode


class A2AView:
    name = "a2a"
    handles = TASK_EVENTS | APPROVAL_EVENTS
    space: Space

    def bind(self, space: Space) -> None:
        self.space = space
        self._updated = space.db(self.name, "updated")
        self._context = space.db(self.name, "context")
        self._canceled = space.db(self.name, "canceled")
        self._working_on = space.db(self.name, "working_on")
        self._approval_task = space.db(self.name, "approval_task")
        self._waiting = space.db(self.name, "waiting")

    # ------------------------------------------------------------------ the fold
    def fold(self, txn: Txn, envelope: Envelope) -> None:
        kind = envelope.event.type
        data = envelope.event.data
        item_id = data.get("id")
        if not isinstance(item_id, str):
            return
        key = id_key(item_id)
        if key is None:
            return
        agent, ts = envelope.stream.encode(), envelope.event.ts.encode()
        if kind.startswith("approval."):
            self._approval(txn, kind, agent, key, ts, envelope.position)
            return
        known = txn.get(key, db=self._updated) is not None
        if kind == c.TASK_CREATED:
            if known:
                return
            context = data.get("a2a")
            if isinstance(context, dict):
                txn.put(key, _encode(context), db=self._context)
        elif not known:
            return  # an event for a task no journal created
        elif kind == c.TASK_STARTED:
            txn.put(agent, key, db=self._working_on)
        elif kind in _TASK_END:
            if txn.get(agent, db=self._working_on) == key:
                txn.delete(agent, db=self._working_on)
            for waiting, _ in self._waiting_of(txn, key):
                txn.delete(waiting, db=self._waiting)
        elif kind == c.TASK_CANCELED:
            operator = data.get("operator")
            recorded = operator if isinstance(operator, str) else ""
            txn.put(key, recorded.encode(), db=self._canceled, overwrite=False)  # the first holds
        txn.put(key, ts, db=self._updated)

    def _approval(
        self, txn: Txn, kind: str, agent: bytes, approval: bytes, ts: bytes, position: int
    ) -> None:
        if kind == c.APPROVAL_REQUESTED:
            task = txn.get(agent, db=self._working_on)
            if task is None or txn.get(approval, db=self._approval_task) is not None:
                return
            link = b"".join((task, b"\0", u64(position)))
            txn.put(approval, link, db=self._approval_task)
            txn.put(link, approval, db=self._waiting)
            txn.put(task, ts, db=self._updated)
            return
        asked = txn.get(approval, db=self._approval_task)
        if asked is None or not txn.delete(asked, db=self._waiting):
            return  # no task's, or no longer pending (resolved, or its task ended)
        txn.put(asked[:-9], ts, db=self._updated)

    def _waiting_of(self, txn: Txn, task: bytes) -> list[tuple[bytes, str]]:
        """The `waiting` keys of one task and their approval ids, in request order."""
        prefix = task + b"\0"
        cursor = txn.cursor(self._waiting)
        found: list[tuple[bytes, str]] = []
        if cursor.set_range(prefix):
            for raw_key, approval in cursor:
                key = bytes(raw_key)
                if not key.startswith(prefix):
                    break
                if len(key) == len(prefix) + 8:  # not a longer id that starts alike
                    found.append((key, _text(approval)))
        return found

    # ------------------------------------------------------------------ reads
    def context_of(self, task_id: str) -> dict[str, Any]:
        """The task's `a2a` map ({} for a task created without one, or unknown)."""
        raw = self._get(self._context, task_id)
        return _decode(raw) if raw is not None else {}

    def canceled_by(self, task_id: str) -> str | None:
        """Who canceled the task ("" when the cancel named nobody); None if it was not."""
        raw = self._get(self._canceled, task_id)
        return _text(raw) if raw is not None else None

    def updated_at(self, task_id: str) -> str | None:
        """When the task's status last changed; None for a task it does not know."""
        raw = self._get(self._updated, task_id)
        return _text(raw) if raw is not None else None

    def working_on(self, agent: str) -> str | None:
        raw = self._get(self._working_on, agent)
        return _text(raw) if raw is not None else None

    def approval_task_of(self, approval_id: str) -> str | None:
        """The task that asked for the approval (kept after it is resolved)."""
        raw = self._get(self._approval_task, approval_id)
        return _text(raw[:-9]) if raw is not None else None

    def pending_approvals(self, task_id: str) -> list[str]:
        """The approvals the task waits for, in request order."""
        key = id_key(task_id)
        if key is None:
            return []
        with self.space.read() as txn:
            return [approval for _, approval in self._waiting_of(txn, key)]

    def _get(self, db: Any, item_id: str) -> bytes | memoryview | None:
        key = id_key(item_id)
        if key is None:
            return None
        with self.space.read() as txn:
            return txn.get(key, db=db)

    def snapshot(self) -> dict[str, Any]:
        with self.space.read() as txn:

            def strings(db: Any) -> dict[str, str]:
                return dict(sorted((_text(k), _text(v)) for k, v in txn.cursor(db)))

            waiting: dict[str, list[str]] = {}
            for link, approval in txn.cursor(self._waiting):  # in request order per task
                waiting.setdefault(_text(link[:-9]), []).append(_text(approval))
            return {
                "context": dict(
                    sorted((_text(k), _decode(v)) for k, v in txn.cursor(self._context))
                ),
                "canceled": strings(self._canceled),
                "updated": strings(self._updated),
                "working_on": strings(self._working_on),
                "approval_task": {
                    _text(k): _text(v[:-9]) for k, v in sorted(txn.cursor(self._approval_task))
                },
                "waiting": dict(sorted(waiting.items())),
            }


def _text(raw: bytes | memoryview) -> str:
    return str(raw, "utf-8")
