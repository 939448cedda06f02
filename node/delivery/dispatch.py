"""Delivering the outbox: each lane's head, in order, one attempt at a time per lane.

A lane is tried when its head is due (an escalation waits for its time; a failed attempt for
its backoff: `backoff_initial_secs` doubling up to `backoff_max_secs`, less a random part of up
to half, or what the receiver's Retry-After asks). The head ends when it is delivered (2xx),
when its deadline passes, or when the receiver answers 410 (the lane then closes); then the
next entry of the lane goes. Only the home of a lane's journal delivers: other nodes keep the
lane parked until the journal moves to them (a failover), so a replica never sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import random
import time
from datetime import UTC, datetime

from node.config.model import ChannelConfig
from node.context import NodeContext
from node.delivery import book as b
from node.delivery import channels as ch
from node.delivery import push
from node.delivery import store as s
from node.delivery.metrics import DeliveryMetrics
from node.delivery.sealing import unseal
from node.delivery.waits import next_turn
from node.delivery.webhooks import Outcome, Poster, message_key, standard_webhook_headers
from projections.journals import Journals

log = logging.getLogger(__name__)
IDLE_WAIT = 60.0
NO_DESTINATION = (
    "this node holds no copy of the destination it can open (sealed to other nodes, or to a "
    "node key it no longer has): the client may set the config again"
)


class Dispatcher:
    def __init__(
        self,
        ctx: NodeContext,
        book: b.Book,
        store: s.OutboxStore,
        writer: s.Writer,
        poster: Poster,
        channels: ch.Channels,
        metrics: DeliveryMetrics,
    ) -> None:
        self.ctx = ctx
        self.book = book
        self.store = store
        self.writer = writer
        self.poster = poster
        self.channels = {c.name: c for c in channels.channels}
        self.metrics = metrics
        delivery = ctx.config.delivery
        self.backoff_initial = delivery.backoff_initial_secs
        self.backoff_max = delivery.backoff_max_secs
        self.slots = delivery.in_flight
        self.journals = ctx.projections.get(Journals)
        self._heap: list[tuple[float, int, str]] = []
        self._due: dict[str, float] = {}
        self._order = itertools.count()
        self._parked: dict[str, set[str]] = {}
        self._in_flight: dict[str, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()

    # ------------------------------------------------------------------ scheduling
    def schedule(self, lane_ids: set[str] | list[str]) -> None:
        for lane_id in lane_ids:
            if lane_id in self._in_flight:
                continue  # rescheduled when its attempt ends
            head = self.book.head(lane_id)
            lane = self.book.lane(lane_id)
            if head is None or lane is None:
                self._due.pop(lane_id, None)
                continue
            due = max(lane.due, head.due)
            if self._due.get(lane_id) == due:
                continue
            self._due[lane_id] = due
            heapq.heappush(self._heap, (due, next(self._order), lane_id))
        self._wake.set()

    def unpark(self, journals: set[str]) -> None:
        """Journals that changed home: their parked lanes are looked at again."""
        lanes = [lane for j in journals for lane in self._parked.pop(j, ())]
        self.schedule(lanes)

    def is_home(self, journal: str) -> bool:
        return self.journals.home_of(journal) in (None, self.ctx.name)

    def in_flight(self) -> int:
        return len(self._in_flight)

    # ------------------------------------------------------------------ the loop
    async def run(self, stopping: asyncio.Event) -> None:
        self.schedule([lane_id for lane_id in self.book.pending])
        while not stopping.is_set():
            now = time.time()
            while self._heap and self._heap[0][0] <= now and len(self._in_flight) < self.slots:
                due, _, lane_id = heapq.heappop(self._heap)
                if self._due.get(lane_id) != due:
                    continue  # superseded by a later schedule
                del self._due[lane_id]
                lane = self.book.lane(lane_id)
                if lane is None or self.book.head(lane_id) is None:
                    continue
                if not self.is_home(lane.journal):
                    self._parked.setdefault(lane.journal, set()).add(lane_id)
                    continue
                self._in_flight[lane_id] = asyncio.ensure_future(self._attempt(lane_id))
            wait = IDLE_WAIT
            if self._heap and len(self._in_flight) < self.slots:
                wait = max(0.0, min(wait, self._heap[0][0] - time.time()))
            self._wake.clear()
            await next_turn(stopping, wait, self._wake)

    async def close(self) -> None:
        for task in list(self._in_flight.values()):
            task.cancel()
        for task in list(self._in_flight.values()):
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # ------------------------------------------------------------------ one attempt
    async def _attempt(self, lane_id: str) -> None:
        try:
            await self._try_head(lane_id)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("a delivery of lane %r failed unexpectedly", lane_id)
            lane = self.book.lane(lane_id)
            if lane is not None:
                lane.due = time.time() + self.backoff_max
        finally:
            self._in_flight.pop(lane_id, None)
            self.schedule([lane_id])

    async def _try_head(self, lane_id: str) -> None:
        lane = self.book.lane(lane_id)
        pending = self.book.head(lane_id)
        entry = self.store.head(lane_id)
        if lane is None or pending is None:
            return
        if entry is None:
            await self._forget_lost(lane, pending)
            return
        if (entry.seq, entry.n) != (pending.seq, pending.n):
            await self._realign(lane, pending)
            return
        now = time.time()
        if now >= entry.deadline:
            lane.expired += 1
            lane.last_error, lane.due = "given up: its deadline passed", 0.0
            self.metrics.ended.labels(kind=entry.kind, how="expired").inc()
            await self.writer.submit(self.book.end_head(lane, entry, now))
            return
        outcome = await self._send(lane, entry)
        if self.book.lane(lane_id) is not lane or self.book.head(lane_id) != pending:
            return  # closed, replaced or forgotten while it was sent: nothing of it to write back
        now = time.time()
        stamp = _iso(now)
        lane.attempts += 1
        lane.last_attempt_at = stamp
        lane.last_status = outcome.status
        kind = entry.kind
        if outcome.ok:
            self.metrics.attempts.labels(kind=kind, outcome="ok").inc()
            self.metrics.latency.labels(kind=kind).observe(max(now - entry.made_at, 0.0))
            self.metrics.ended.labels(kind=kind, how="delivered").inc()
            lane.delivered += 1
            lane.last_error, lane.last_delivered_at, lane.due = "", stamp, 0.0
            await self.writer.submit(self.book.end_head(lane, entry, now))
            return
        self.metrics.attempts.labels(
            kind=kind, outcome="refused" if outcome.refused else "failed"
        ).inc()
        lane.failed_attempts += 1
        lane.last_error = outcome.error
        if outcome.gone:
            self.metrics.ended.labels(kind=kind, how="gone").inc(lane.pending)
            await self.writer.submit(self.book.close(lane, "gone", now, drop=True))
            return
        entry.attempts += 1
        delay = self.backoff(entry.attempts, outcome.retry_after)
        lane.due = now + delay
        await self.writer.submit([s.put_entry(entry), s.put_lane(lane)])

    async def _forget_lost(self, lane: s.Lane, pending: b.Pending) -> None:
        """The book's head is not in the store: once every write submitted so far has ended
        (it may be one of them), a head still missing was lost by a failed write, and goes
        from the book too (else the lane would be tried again at once, forever)."""
        await self.writer.idle()
        if self.book.lane(lane.id) is not lane or self.book.head(lane.id) != pending:
            return  # rebuilt (the fold's recovery) or moved on meanwhile
        if self.store.head(lane.id) is not None:
            return  # it was a write in flight: tried again when scheduled
        log.warning(
            "lane %r: entry %s is not in the outbox's store; forgotten", lane.id, pending.entry_id
        )
        lane.last_error = "an entry the outbox's store did not hold was skipped (a failed write)"
        await self.writer.submit(self.book.forget_entry(lane.id, pending.seq, pending.n))

    async def _realign(self, lane: s.Lane, pending: b.Pending) -> None:
        """The store's head is not the book's: once every write submitted so far has ended
        (the store may only have been behind), a lane that still differs lost a write (the
        delete of an entry it ended, say) and its queue is rebuilt from the store, which is
        what a restart would deliver; it is not tried again every 0.05 s until the book's
        next rebuild. The lane is scheduled again by the attempt's end."""
        await self.writer.idle()
        if self.book.lane(lane.id) is not lane or self.book.head(lane.id) != pending:
            return  # rebuilt (the fold's recovery) or moved on meanwhile
        entry = self.store.head(lane.id)
        if entry is None or (entry.seq, entry.n) == (pending.seq, pending.n):
            return  # caught up, or lost: looked at again when scheduled
        log.warning(
            "lane %r: the outbox's store holds entry %s at its head, the book %s (a failed "
            "write); the lane's queue is rebuilt from the store",
            lane.id,
            entry.id,
            pending.entry_id,
        )
        self.book.reload_lane(self.store, lane.id)

    def backoff(self, attempts: int, retry_after: float | None) -> float:
        """Exponential, with up to half taken off at random (so that many lanes that failed
        together do not all come back at once); at least what Retry-After asked."""
        ceiling = min(self.backoff_max, self.backoff_initial * 2.0 ** min(attempts - 1, 60))
        delay = ceiling * (1 - random.random() / 2)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.backoff_max))
        return delay

    async def _send(self, lane: s.Lane, entry: s.Entry) -> Outcome:
        if entry.kind == "push":
            config = self.book.config(lane.subject, lane.target)
            destination = (
                unseal(config.sealed, self.ctx.name, self.ctx.key) if config is not None else None
            )
            if destination is None:
                return Outcome(False, error=NO_DESTINATION)
            headers = push.headers_of(destination, message_key(entry.id))
            return await self.poster.post(destination.url, entry.body, headers)
        channel = self.channels.get(lane.target)
        if channel is None or channel.url is None:
            return Outcome(False, error=f"this node has no channel named {lane.target!r}")
        return await self._to_channel(channel, entry)

    async def _to_channel(self, channel: ChannelConfig, entry: s.Entry) -> Outcome:
        assert channel.url is not None
        if channel.kind == "webhook":
            assert channel.secret is not None
            headers = standard_webhook_headers(channel.secret, entry.id, entry.body)
            return await self.poster.post(channel.url, entry.body, headers)
        ok, why = await ch.send_apprise(channel.url, entry.body, self.poster.timeout)
        return Outcome(ok, error=why)


def _iso(epoch: float) -> str:
    return (
        datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )
