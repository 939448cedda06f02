"""Every node's heads in the mesh's key-value bucket: the convergence report without probes.

Each node puts its heads of every replicated journal (key: hex of its name, value:
`{"node", "heads"}`) when they change, at most every `heads_interval_secs` (and again every
REPUT_SECS). A configured peer's heads become its acknowledgements (acks.py: the convergence
report, `agent-node status` and the console's peers view read them as with HTTP), recorded like
the HTTP replicator's: only journals this node holds, never beyond its own head. What a record
may trigger a repair for is decided by the claim book (nats/claims.py): a record is a peer's
claim, checked and bounded, not a fact. A record over MAX_HEADS_BYTES or naming more than
MAX_HEADS_JOURNALS journals is ignored whole.

Peers' records are followed, not polled: a consumer of the bucket's stream of this node's own
(`heads-<hex(node)>`, filtered to the configured peers' keys, starting at each key's last
record, no acknowledgements, one replica in memory) delivers a record only when it changes,
through pull requests of HEADS_EXPIRES_SECS (nats/raw.py). Polling every peer's key every
interval was the NATS transport's largest cost on a ten-node mesh (bench/RESULTS.md). The
follower starts over with a fresh consumer (counted in svc_nats_heads_restarts, logged) when the
server says the consumer is gone, when nothing at all (not even a request's expiry) came for
HEADS_SILENT_SECS (its server died), when a delivery was skipped, or when a call fails; while it
cannot, its beat stops and the link's watchdog restarts the connection (nats/mesh.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import msgspec
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError
from nats.js.kv import KeyValue

from node.sync.acks import AckRecorder
from node.sync.nats.claims import ClaimBook
from node.sync.nats.link import Link, OnLink
from node.sync.nats.raw import Delivered, RawPull
from node.sync.nats.subjects import (
    Bucket,
    bucket_name,
    heads_consumer_name,
    kv_stream,
    kv_subject,
    name_of,
    token,
)
from projections.journals import Journals

log = logging.getLogger("agent-node.sync")
MAX_HEADS_BYTES = 1 << 20
MAX_HEADS_JOURNALS = 100_000
REPUT_SECS = 10.0
# a pull request for peers' records lives this long: its expiry (408) tells the consumer lives
HEADS_EXPIRES_SECS = 2.0
# nothing at all from the consumer for this long: it is gone with its server; start over
HEADS_SILENT_SECS = HEADS_EXPIRES_SECS + 3.0
# records asked for at once (one per peer and change), and their bytes at most
HEADS_BATCH = 256
HEADS_FETCH_MAX_BYTES = 8 << 20
# an unused consumer left behind (this node died) is removed by the server after this long
HEADS_CONSUMER_IDLE_SECS = 60.0
MAX_RESTART_BACKOFF_SECS = 5.0
MIN_TURN_SECS = 0.05


class HeadsStalled(ConnectionError):
    """The follower of peers' heads must start over with a fresh consumer."""


class HeadsRecord(msgspec.Struct):
    node: str
    heads: dict[str, int]


_decoder = msgspec.json.Decoder(HeadsRecord)


class HeadsBoard(OnLink):
    def __init__(self, link: Link, kv: KeyValue, acks: AckRecorder, claims: ClaimBook) -> None:
        super().__init__(link)
        ctx = link.ctx
        self._kv = kv
        self._mesh = ctx.config.mesh.name
        self._stream = kv_stream(bucket_name(self._mesh, Bucket.HEADS))
        self._consumer = heads_consumer_name(ctx.name)
        self._acks = acks
        self._peers = {p.name for p in ctx.config.peers}
        self._claims = claims
        # configured peer's key → (its record's revision, the record; None: ignored)
        self._decoded: dict[str, tuple[int, HeadsRecord | None]] = {}
        self._pull: RawPull | None = None
        self.last_error = ""
        # the last turn of each loop (nats/mesh.py restarts the link when one stops turning)
        self.put_beat = self.read_beat = time.monotonic()

    def own_heads(self) -> dict[str, int]:
        heads = self._ctx.projections.get(Journals).head
        return {s: q for s, q in heads.items() if not s.startswith("$")}

    async def publish(self) -> None:
        last: dict[str, int] | None = None
        last_put = time.monotonic()
        interval = self._ctx.config.mesh.heads_interval_secs
        while True:
            heads = self.own_heads()
            if heads != last:
                record = HeadsRecord(self._ctx.name, heads)
                await self._kv.put(token(self._ctx.name), msgspec.json.encode(record))
                last, last_put = heads, time.monotonic()
            elif time.monotonic() - last_put > REPUT_SECS:
                last = None  # put again: a put acknowledged just before a failover may be lost
            self.put_beat = time.monotonic()
            await asyncio.sleep(interval)

    def reconnected(self) -> None:
        if self._pull is not None:
            self._pull.forget_requests()

    async def watch(self) -> None:
        """Follow the configured peers' records, starting over whenever the follower fails."""
        if not self._peers:
            while True:  # nothing to follow; the loop still turns for the watchdog
                self.read_beat = time.monotonic()
                await asyncio.sleep(HEADS_EXPIRES_SECS)
        backoff = 0.2
        while True:
            try:
                await self._follow()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # start over; the watchdog sees a follower that cannot
                self._metrics.heads_restarts.inc()
                text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                if text != self.last_error:
                    log.warning("nats heads: %s; following peers' heads again", text)
                self.last_error = text
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_RESTART_BACKOFF_SECS)

    async def _follow(self) -> None:
        await self._create_consumer()
        pull = RawPull(
            self._nc,
            self._stream,
            self._consumer,
            HEADS_BATCH,
            expires=HEADS_EXPIRES_SECS,
            max_bytes=max(HEADS_FETCH_MAX_BYTES, 2 * self._nc.max_payload),
            gone_when_unanswered=True,  # its one in-memory replica went with its server
        )
        self._pull = pull
        await pull.start()
        interval = self._ctx.config.mesh.heads_interval_secs
        delivered = 0  # the consumer's last delivery: the next must follow it
        applied: dict[str, int] = {}  # own heads when the records were last applied
        try:
            while True:
                if time.monotonic() - pull.heard > HEADS_SILENT_SECS:
                    raise HeadsStalled(f"no word from the heads consumer for {HEADS_SILENT_SECS} s")
                await pull.top_up()
                began = time.monotonic()
                messages = await pull.take(interval)
                if not messages and time.monotonic() - began < MIN_TURN_SECS:
                    await asyncio.sleep(MIN_TURN_SECS)  # a status at once: not asked again at once
                changed = False
                for message in messages:
                    delivered += 1
                    if message.consumer_seq != delivered:
                        raise HeadsStalled(
                            f"heads delivery {message.consumer_seq} came after {delivered - 1}"
                        )
                    changed = self._received(message) or changed
                self.read_beat = time.monotonic()
                if self.last_error and messages:
                    log.info("nats heads: following peers' heads again")
                    self.last_error = ""
                # acks are capped at this node's own heads, which may have grown since
                own = self._ctx.projections.get(Journals).head
                if changed or own != applied:
                    applied = dict(own)
                    self._apply_all()
        finally:
            self._pull = None
            with contextlib.suppress(Exception):
                await pull.stop()

    async def _create_consumer(self) -> None:
        """A fresh consumer from each peer's last record (one left by an earlier connection
        stands elsewhere in the stream: deleted first)."""
        with contextlib.suppress(NotFoundError):
            await self._js.delete_consumer(self._stream, self._consumer)
        filters = sorted(
            kv_subject(bucket_name(self._mesh, Bucket.HEADS), token(p)) for p in self._peers
        )
        one = len(filters) == 1  # nats-py sends a single filter in the request's subject
        await self._js.add_consumer(
            self._stream,
            config=ConsumerConfig(
                name=self._consumer,
                filter_subject=filters[0] if one else None,
                filter_subjects=None if one else filters,
                deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
                ack_policy=AckPolicy.NONE,
                num_replicas=1,
                mem_storage=True,
                inactive_threshold=HEADS_CONSUMER_IDLE_SECS,
            ),
        )

    def _received(self, message: Delivered) -> bool:
        """Take a delivered record; whether it was one (a deleted key's marker is empty)."""
        self._metrics.heads_records.inc()
        _, _, key = message.subject.decode(errors="replace").rpartition(".")
        value = message.data
        if not value or len(value) > MAX_HEADS_BYTES:
            return False
        self.take(key, value, message.stream_seq)
        return True

    def _apply_all(self) -> None:
        """Every peer's last record again: acks are capped at this node's own heads, and a
        relay's claims at its journal's home's record (nats/claims.py)."""
        for _, record in list(self._decoded.values()):
            if record is not None:
                self._apply(record)

    def take(self, key: str, value: bytes, revision: int = 0) -> None:
        record = self._record(key, value, revision)
        if record is not None:
            self._apply(record)

    def _record(self, key: str, value: bytes, revision: int) -> HeadsRecord | None:
        """A configured peer's record, decoded once per revision; None when it is not one."""
        cached = self._decoded.get(key)
        if cached is not None and revision and cached[0] == revision:
            return cached[1]  # the same record: not decoded again (it may be 1 MiB)
        try:
            record = _decoder.decode(value)
            named = name_of(key)
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError):
            return None
        if record.node != named or named not in self._peers:
            return None
        if len(record.heads) > MAX_HEADS_JOURNALS:
            log.warning(
                "nats: %s's heads record names %d journals; ignored", named, len(record.heads)
            )
            self._decoded[key] = (revision, None)
            return None
        self._decoded[key] = (revision, record)
        return record

    def _apply(self, record: HeadsRecord) -> None:
        self._claims.take(record.node, record.heads)
        held = self._ctx.projections.get(Journals).head
        self._acks.note(
            record.node,
            {s: min(q, held[s]) for s, q in record.heads.items() if s in held and q >= 0},
        )
