"""The receiving side: one durable pull consumer per node on the mesh's stream.

Fetched envelopes go through the same receive path as an HTTP push (receive.py), a batch at a
time, and are acknowledged only after it returns, that is after the
local LMDB commit (one ack per batch: the consumer's ack policy is `all`). A rejected envelope
is acknowledged too (the rejection is counted, logged and reported as a finding): redelivering
it would change nothing. A `gap` (the stream no longer holds what comes before) is repaired
over HTTP at once and the envelope received again; what still cannot be had is left to the
heads check (nats_mesh.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque

import msgspec
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from node.context import NodeContext
from node.sync.incidents import Incidents
from node.sync.nats_metrics import NatsMetrics
from node.sync.nats_repair import HttpRepair
from node.sync.nats_subjects import all_subjects, durable_name, parse_subject, stream_name
from node.sync.receive import Receiver, Rejection

log = logging.getLogger("agent-node.sync")
GAP = "gap"
# rejections that are part of normal operation (redeliveries, repaired gaps), or reported
# already (equivocation: receive.py journals a critical finding)
UNREMARKABLE = frozenset({GAP, "duplicate", "equivocation"})
MAX_REJECTION_FINDINGS_PER_HOUR = 10
UNKNOWN_PUBLISHER = "(nats)"
# the receive path's "peer" for stream batches: not a configured peer, so no acks are inferred
# from it (heads come from the bucket) and equivocation findings share one hourly budget
STREAM_PEER = "(nats stream)"
# unacknowledged messages (this node crashed or lost its connection mid-batch) come again
# after this long; a batch normally takes well under a second
ACK_WAIT_SECS = 10
MAX_EMPTY_FETCHES_WHILE_WAITING = 3


class NatsConsumer:
    def __init__(
        self,
        ctx: NodeContext,
        js: JetStreamContext,
        receiver: Receiver,
        repair: HttpRepair,
        incidents: Incidents,
        metrics: NatsMetrics,
    ) -> None:
        self._incidents = incidents
        self._budget: dict[str, deque[float]] = {}  # publisher → times of its findings
        self._ctx = ctx
        self._js = js
        self._receiver = receiver
        self._repair = repair
        self._metrics = metrics
        self._mesh = ctx.config.mesh
        self._peers = {p.name for p in ctx.config.peers}
        self.subscription: JetStreamContext.PullSubscription | None = None
        self.pending = 0  # the consumer's lag at the last look (waiting + unacknowledged)
        self.waiting = 0
        self._stalls = 0
        self.beat = time.monotonic()  # the last fetch started (nats_mesh.py watches it)

    async def run(self) -> None:
        mesh = self._mesh.name
        self.subscription = await self._js.pull_subscribe(
            all_subjects(mesh),
            durable=durable_name(self._ctx.name),
            stream=stream_name(mesh),
            config=ConsumerConfig(
                ack_policy=AckPolicy.ALL,  # acking a batch's last message acks the batch
                deliver_policy=DeliverPolicy.ALL,
                ack_wait=ACK_WAIT_SECS,
                max_ack_pending=20_000,
            ),
        )
        # the next batch is fetched while this one is verified and committed
        fetching = asyncio.ensure_future(self._fetch())
        try:
            while True:
                messages = await fetching
                fetching = asyncio.ensure_future(self._fetch())
                if messages:
                    await self.handle(messages)
        finally:
            fetching.cancel()

    async def _fetch(self) -> list[Msg]:
        assert self.subscription is not None
        self.beat = time.monotonic()
        try:
            messages = await self.subscription.fetch(self._mesh.fetch_batch, timeout=1)
        except TimeoutError:
            await self.look_at_lag()
            # after a server of the cluster died, a pull subscription was seen to get nothing
            # while the consumer had messages waiting: start over with a new one
            self._stalls = self._stalls + 1 if self.waiting else 0
            if self._stalls >= MAX_EMPTY_FETCHES_WHILE_WAITING:
                raise ConnectionError(f"{self.waiting} message(s) wait, fetches get none") from None
            return []
        self._stalls = 0
        return messages

    async def look_at_lag(self) -> None:
        if self.subscription is None:
            return
        info = await self.subscription.consumer_info()
        self.waiting = int(info.num_pending or 0)
        self.pending = self.waiting + int(info.num_ack_pending or 0)
        self._metrics.consumer_lag.set(self.pending)

    async def handle(self, messages: list[Msg]) -> None:
        """The whole batch in one receive: one LMDB commit, journals verified on parallel
        lanes (as one HTTP push). Publishers are named for the findings only."""
        items: list[msgspec.Raw] = []
        publishers: list[str] = []
        for message in messages:
            if message.metadata.num_delivered > 1:
                self._metrics.redeliveries.inc()
            parsed = parse_subject(self._mesh.name, message.subject)
            if parsed and parsed[0] == self._ctx.name:
                continue  # our own envelopes: nothing to do
            # the subject names the publisher; only configured names key per-peer state
            publishers.append(
                parsed[0] if parsed and parsed[0] in self._peers else UNKNOWN_PUBLISHER
            )
            items.append(msgspec.Raw(message.data))
        if items:
            outcome = await self._receiver.receive(STREAM_PEER, items)
            gaps = [r for r in outcome.rejections if r.reason == GAP]
            if gaps:
                await self._fill(gaps, items)
            for rejection in outcome.rejections:
                if rejection.reason not in UNREMARKABLE:
                    await self._report(publishers[rejection.index], rejection)
        if messages:
            await messages[-1].ack()

    async def _report(self, publisher: str, rejection: Rejection) -> None:
        """A finding per rejected stream message (once per journal, seq and reason), at most
        MAX_REJECTION_FINDINGS_PER_HOUR per publisher: what an HTTP push answers its sender
        has no sender to go to here, and every node must say what it refused."""
        key = f"nats-rejected/{rejection.agent}/{rejection.seq}/{rejection.reason}"
        if self._incidents.seen(key):
            return
        now = time.monotonic()
        times = self._budget.setdefault(publisher, deque())
        while times and now - times[0] > 3600:
            times.popleft()
        if len(times) >= MAX_REJECTION_FINDINGS_PER_HOUR:
            return
        times.append(now)
        await self._incidents.report(
            key,
            "high",
            f"rejected envelope {rejection.agent}#{rejection.seq} from the mesh stream",
            f"published by {publisher}: {rejection.reason}: {rejection.detail}"[:1000],
        )

    async def _fill(self, gaps: list[Rejection], items: list[msgspec.Raw]) -> None:
        """Repair each gapped journal up to just before its first gapped envelope, then take
        the gapped envelopes again."""
        first: dict[str, int] = {}
        for r in gaps:
            if r.agent is not None and r.seq is not None:
                first[r.agent] = min(first.get(r.agent, r.seq), r.seq)
        for journal, seq in first.items():
            await self._repair.repair(journal, seq - 1)
        again = [items[r.index] for r in gaps]
        await self._receiver.receive(STREAM_PEER, again)
