"""Approval timeouts: a timer per pending request this node is home of, armed from the read
model at start (a request that expired while the node was down times out at once), and the due
ones journaled as `approval.timed_out` together, in one transaction."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime

from eventstore.store import NewEvent
from node.context import NodeContext
from projections import catalogue as c
from projections.approvals import Approvals
from projections.journals import Journals

log = logging.getLogger(__name__)


class ApprovalTimeouts:
    def __init__(self, ctx: NodeContext, claimed: set[str]) -> None:
        self.ctx = ctx
        # shared with the gate: ids with a resolution being appended get no second one
        self._claimed = claimed
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._due: set[str] = set()
        self._flusher: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def projection(self) -> Approvals:
        return self.ctx.projections.get(Approvals)

    async def start(self) -> None:
        now = datetime.now(UTC)
        journals = self.ctx.projections.get(Journals)
        overdue = []
        for request in self.projection.list():
            if journals.home_of(request.agent) not in (None, self.ctx.name):
                continue  # a replica: its home node times it out
            remaining = _seconds_until(request.expires_at, now, request.timeout_secs)
            if remaining <= 0:
                overdue.append(request.id)
            else:
                self.arm(request.id, remaining)
        if overdue:
            log.info("timing out %d approval(s) that expired while the node was down", len(overdue))
            self._due.update(overdue)
            await self._flush_due()

    async def close(self) -> None:
        self._closed = True
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher

    def arm(self, approval_id: str, delay: float) -> None:
        if self._closed or not self.projection.is_pending(approval_id):
            return
        loop = asyncio.get_running_loop()
        self._timers[approval_id] = loop.call_later(delay, self._expire, approval_id)

    def cancel(self, approval_id: str) -> None:
        handle = self._timers.pop(approval_id, None)
        if handle is not None:
            handle.cancel()

    def _expire(self, approval_id: str) -> None:
        self._timers.pop(approval_id, None)
        self._due.add(approval_id)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush_due())

    async def _flush_due(self) -> None:
        """Append `approval.timed_out` for every due request still pending, in one transaction."""
        while self._due and not self._closed:
            due, self._due = self._due, set()
            requests = [
                request
                for i in sorted(due)
                if i not in self._claimed and (request := self.projection.get(i)) is not None
            ]
            if not requests:
                continue
            ids = [r.id for r in requests]
            events = [NewEvent(r.agent, *c.event_of(c.ApprovalTimedOut(id=r.id))) for r in requests]
            self._claimed.update(ids)
            try:
                await self.ctx.store.append_many(events)
            except Exception:
                log.exception("could not journal %d approval timeout(s); retrying", len(ids))
                self._due.update(ids)
                await asyncio.sleep(1)
            finally:
                self._claimed.difference_update(ids)


def _seconds_until(timestamp: str, now: datetime, fallback: float) -> float:
    """Seconds from `now` to an ISO timestamp; `fallback` when a foreign one does not parse."""
    try:
        moment = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return fallback
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - now).total_seconds()
