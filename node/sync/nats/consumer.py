"""The receiving side: one durable pull consumer per node on the mesh's stream.

Messages are pulled lean (nats/raw.py: bytes, subject and ack subject, no nats-py Msg), the
next batch streaming in while this one is received. Fetched envelopes go through the same
receive path as an HTTP push (sync/rules/receiver.py), a batch at a time, and are acknowledged
only after the local LMDB commit (one ack per batch: the consumer's ack policy is `all`, so
acking the batch's last message acknowledges every message delivered before it). Two batches
are in hand at once: one is screened and its signatures checked while the one before commits
(the writer takes them in the order they were staged, and settles who may write a journal in
its transaction). A rejected envelope is acknowledged too (the rejection is counted, logged and
reported as a finding): redelivering it would change nothing. A `gap` (the stream no longer
holds what comes before) is handed to the repair queue (nats/repair_queue.py) and acknowledged
like the rest: the consumer never waits on HTTP, and a gap in one journal holds back no other
journal. The gapped journal's later envelopes are refused as `gap` too (its order is kept)
until the repair fills the hole; the queue remembers the first message acknowledged unapplied
and reads it again from the stream if the peers could not serve that far.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import deque
from typing import TYPE_CHECKING, NamedTuple

import msgspec
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from eventstore.imports import allowed_cpus
from node.sync.nats.envelopes import envelopes_of
from node.sync.nats.gaps import GAP, STREAM_PEER, Hold
from node.sync.nats.link import Link, OnLink
from node.sync.nats.raw import Delivered, RawPull
from node.sync.nats.subjects import (
    durable_name,
    envelope_subjects,
    parse_subject,
    stream_name,
)
from node.sync.rules.outcome import PushOutcome, Rejection
from node.sync.rules.receiver import MIN_LANE_SPLIT, Receiver, Staged

if TYPE_CHECKING:
    from node.sync.nats.repair_queue import RepairQueue

log = logging.getLogger("agent-node.sync")
# rejections that are part of normal operation (redeliveries, repaired gaps, among them a
# takeover that could not be judged yet), or reported already (equivocation: sync/rules/receiver.py
# journals a critical finding)
UNREMARKABLE = frozenset({GAP, "duplicate", "equivocation"})
MAX_REJECTION_FINDINGS_PER_HOUR = 10
UNKNOWN_PUBLISHER = "(nats)"
# unacknowledged messages (this node crashed or lost its connection mid-batch) come again
# after this long; a batch normally takes well under a second
ACK_WAIT_SECS = 10
MAX_EMPTY_FETCHES_WHILE_WAITING = 3
FETCH_WAIT_SECS = 1.0
MAX_SUBJECTS_REMEMBERED = 10_000
# lanes of a batch staged side by side, each checking its signatures in one share per CPU:
# as many as keep the executor's threads busy (min(32, cpus + 4): 3 lanes on 2 cores), as
# concurrent HTTP pushes do
STAGE_LANES = max(1, min(32, (os.cpu_count() or 1) + 4) // allowed_cpus())
# bytes a pull request may deliver (two are in hand at most): about 1,700 envelopes
FETCH_MAX_BYTES = 1 << 20
# what the server counts of a message beyond its payload (subject, reply, headers), at most
MESSAGE_OVERHEAD_BYTES = 4096


class _Batch(NamedTuple):
    items: list[msgspec.Raw]
    publishers: list[str]  # who published each item
    messages: list[Delivered]  # the message holding each item (its subject and stream seq)
    # each lane's items (indices into `items`, whole journals) as staged; empty: nothing in it
    # for this node
    lanes: list[tuple[list[int], Staged]]


class _JournalOf(msgspec.Struct):
    agent: str  # the envelope's journal; its other fields are the receive path's


_journal_decoder = msgspec.json.Decoder(_JournalOf)


def journal_of(item: msgspec.Raw) -> str | None:
    """The journal an envelope names (None: unreadable; the receive path refuses it)."""
    try:
        return _journal_decoder.decode(item).agent
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def lanes_of(items: list[msgspec.Raw]) -> list[list[int]]:
    """Indices of the items split into up to STAGE_LANES balanced lanes of whole journals,
    staged side by side: their signatures are checked at once, as an HTTP receiver checks
    concurrent pushes. By the journal each envelope names, not the subject it came on: a
    member's subject may carry envelopes of several journals, and two subjects (the home's
    and a member's) one journal, whose envelopes must be screened, judged and committed in
    one lane, in the batch's order."""
    if len(items) < MIN_LANE_SPLIT:
        return [list(range(len(items)))]
    by_journal: dict[str | None, list[int]] = {}
    for index, item in enumerate(items):
        by_journal.setdefault(journal_of(item), []).append(index)
    if len(by_journal) == 1:
        return [list(range(len(items)))]
    lanes: list[list[int]] = [[] for _ in range(min(STAGE_LANES, len(by_journal)))]
    for indices in sorted(by_journal.values(), key=len, reverse=True):
        min(lanes, key=len).extend(indices)
    return [sorted(lane) for lane in lanes if lane]


class NatsConsumer(OnLink):
    def __init__(self, link: Link, receiver: Receiver, repair: RepairQueue) -> None:
        super().__init__(link)
        ctx = link.ctx
        self._budget: dict[str, deque[float]] = {}  # publisher → times of its findings
        self._receiver = receiver
        self._repair = repair
        self._mesh = ctx.config.mesh
        self._stream = stream_name(self._mesh.name)
        self._durable = durable_name(ctx.name)
        self._peers = {p.name for p in ctx.config.peers}
        self._publishers: dict[bytes, str | None] = {}  # subject → its publisher (None: us)
        self.pull: RawPull | None = None
        self.pending = 0  # the consumer's lag at the last look (waiting + unacknowledged)
        self.waiting = 0
        # envelopes a message held lately (a message holds a run of them): how many envelopes
        # `waiting` messages are, about
        self.run_length = 1.0
        self._stalls = 0
        self.beat = time.monotonic()  # the last fetch started (nats/mesh.py watches it)

    async def run(self) -> None:
        await self._ensure_consumer()
        self.pull = RawPull(
            self._nc,
            self._stream,
            self._durable,
            self._mesh.fetch_batch,
            max_bytes=self._max_bytes(),
        )
        await self.pull.start()
        settling: asyncio.Task[None] | None = None  # the batch before: committing, then acked
        try:
            while True:
                await self.pull.top_up()
                messages = await self._fetch(self.pull)
                await self.pull.top_up()  # the next batch streams in while this one is received
                if not messages:
                    if settling is not None and settling.done():
                        settling.result()  # its failure ends the loop
                        settling = None
                    continue
                batch = await self._stage(messages)  # verified while the one before commits
                if settling is not None:
                    await settling
                settling = asyncio.create_task(self._settle(messages, batch))
        finally:
            if settling is not None:
                settling.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await settling
            await self.pull.stop()

    def _max_bytes(self) -> int:
        """A pull request's bytes at most: FETCH_MAX_BYTES, and never less than the largest
        message the server takes (a message larger than a request's bytes is never delivered:
        a member publishing one would stop this consumer)."""
        return max(FETCH_MAX_BYTES, self._nc.max_payload + MESSAGE_OVERHEAD_BYTES)

    def reconnected(self) -> None:
        if self.pull is not None:
            self.pull.forget_requests()

    def _filters(self) -> list[str]:
        """The configured peers' envelope subjects: a node's own envelopes are not delivered
        back to it (that was half of a publishing node's deliveries, and the server's work),
        nor anyone's lease log (node/placement/leaselog.py: read by the judge, never
        received)."""
        peers = sorted(envelope_subjects(self._mesh.name, p) for p in self._peers)
        return peers or [envelope_subjects(self._mesh.name)]

    async def _ensure_consumer(self) -> None:
        """The node's durable consumer, created when missing, its subjects brought up to date
        when the peers changed (where it stands in the stream is kept); else left as is.

        A peer added later gets no delivery of what it published before the consumer stood
        past it: the heads check repairs those journals over HTTP (nats/mesh.py)."""
        filters = self._filters()
        try:
            info = await self._js.consumer_info(self._stream, self._durable)
            held = info.config.filter_subjects or [info.config.filter_subject or ""]
            if sorted(held) == filters:
                return
            log.info("nats: the consumer's subjects follow the peers (%d)", len(self._peers))
        except NotFoundError:
            pass
        await self._js.add_consumer(
            self._stream,
            config=ConsumerConfig(
                name=self._durable,
                durable_name=self._durable,
                filter_subjects=filters,
                ack_policy=AckPolicy.ALL,  # acking a batch's last message acks the batch
                deliver_policy=DeliverPolicy.ALL,
                ack_wait=ACK_WAIT_SECS,
                max_ack_pending=20_000,
            ),
        )

    async def _fetch(self, pull: RawPull) -> list[Delivered]:
        self.beat = time.monotonic()
        messages = await pull.take(FETCH_WAIT_SECS)
        if messages:
            self._stalls = 0
            return messages
        await self.look_at_lag()
        if self.waiting:
            pull.forget_requests()  # ask again: the server may have dropped the requests
        # after a server of the cluster died, a pull subscription was seen to get nothing
        # while the consumer had messages waiting: start over with a new one
        self._stalls = self._stalls + 1 if self.waiting else 0
        if self._stalls >= MAX_EMPTY_FETCHES_WHILE_WAITING:
            raise ConnectionError(f"{self.waiting} message(s) wait, fetches get none")
        return []

    @property
    def waiting_envelopes(self) -> float:
        """About how many envelopes wait on the stream for this node."""
        return self.waiting * self.run_length

    async def look_at_lag(self) -> None:
        if self.pull is None:
            return
        info = await self._js.consumer_info(self._stream, self._durable)
        self.waiting = int(info.num_pending or 0)
        self.pending = self.waiting + int(info.num_ack_pending or 0)
        self._metrics.consumer_lag.set(self.pending)

    def _publisher(self, subject: bytes) -> str | None:
        """Who published on `subject` (None: this node), as findings name it; remembered,
        within a bound, since a batch holds few subjects many times over."""
        known = self._publishers.get(subject, "")
        if known != "":
            return known
        parsed = parse_subject(self._mesh.name, subject.decode(errors="replace"))
        publisher: str | None = UNKNOWN_PUBLISHER
        if parsed and parsed[0] == self._ctx.name:
            publisher = None
        elif parsed and parsed[0] in self._peers:
            publisher = parsed[0]  # only configured names key per-peer state
        if len(self._publishers) >= MAX_SUBJECTS_REMEMBERED:
            self._publishers.clear()
        self._publishers[subject] = publisher
        return publisher

    async def _stage(self, messages: list[Delivered]) -> _Batch:
        """Screen, verify and queue a batch for the writer (Receiver.stage), in lanes of whole
        journals verified side by side: it commits after the batch staged before it (every
        lane of it). Publishers are named for the findings only."""
        items: list[msgspec.Raw] = []
        publishers: list[str] = []
        origins: list[Delivered] = []
        redelivered = 0
        for message in messages:
            if message.deliveries > 1:
                redelivered += 1
            publisher = self._publisher(message.subject)
            if publisher is None:
                continue  # our own (a node without peers reads every subject)
            envelopes = envelopes_of(message.data)
            publishers += [publisher] * len(envelopes)
            origins += [message] * len(envelopes)
            items += envelopes
        if redelivered:
            self._metrics.redeliveries.inc(redelivered)
        self.run_length = 0.8 * self.run_length + 0.2 * max(1.0, len(items) / len(messages))
        if not items:
            return _Batch(items, publishers, origins, [])
        lanes = lanes_of(items)
        staged = await asyncio.gather(
            *(self._receiver.stage([items[i] for i in lane]) for lane in lanes)
        )
        return _Batch(items, publishers, origins, list(zip(lanes, staged, strict=True)))

    async def _settle(self, messages: list[Delivered], batch: _Batch) -> None:
        """Once the batch is committed: hand its gaps to the repair queue, report its
        rejections, then acknowledge it (the consumer's ack policy is `all`: one ack for the
        batch)."""
        if batch.lanes:
            outcome = await self._settle_lanes(batch.lanes)
            gaps = [r for r in outcome.rejections if r.reason == GAP]
            if gaps:
                self._hand_over(gaps, batch)
                await self._repair.save_holds()  # on disk before the acknowledgement
            for rejection in outcome.rejections:
                if rejection.reason not in UNREMARKABLE:
                    await self._report(batch.publishers[rejection.index], rejection)
        assert self.pull is not None
        await self.pull.ack_through(messages[-1])

    async def _settle_lanes(self, lanes: list[tuple[list[int], Staged]]) -> PushOutcome:
        """Every lane settled, as one outcome whose rejections index the whole batch."""
        whole = PushOutcome()
        for lane, staged in lanes:
            outcome = await self._receiver.settle(STREAM_PEER, staged)
            whole.accepted += outcome.accepted
            whole.rejections += [
                msgspec.structs.replace(r, index=lane[r.index]) for r in outcome.rejections
            ]
        whole.rejections.sort(key=lambda r: r.index)
        return whole

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

    def _hand_over(self, gaps: list[Rejection], batch: _Batch) -> None:
        """Ask the repair queue for each gapped journal up to its last gapped envelope,
        remembering the first one (acknowledged unapplied with the batch)."""
        want: dict[str, int] = {}
        first: dict[str, Rejection] = {}
        for r in gaps:  # in the batch's order
            if r.agent is None or r.seq is None:
                continue
            want[r.agent] = max(want.get(r.agent, 0), r.seq)
            first.setdefault(r.agent, r)
        for journal, r in first.items():
            message = batch.messages[r.index]
            hold = Hold(message.subject.decode(errors="replace"), message.stream_seq, r.seq or 0)
            self._repair.request(
                journal, want[journal], hold=hold, publisher=batch.publishers[r.index]
            )
