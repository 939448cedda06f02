"""The home node's side: publish each own envelope once, in order, to the mesh's stream.

Each message is one envelope in exactly the bytes an HTTP push carries for it (the spec's
"as pushed" object), with `Nats-Msg-Id` = `<journal>:<seq>` so that a re-publish after a crash
is dropped by the server (inside its duplicate window). Publishes are asynchronous and
overlap their acknowledgements: up to `publish_window` are in flight, and more are read and
sent as acknowledgements come back (not a window at a time). Acknowledgements come to a private
inbox as raw bytes (nats_raw.py; nats-py's `publish_async` made a future, a Msg and a PubAck
dataclass per message). The cursor (per journal, the last seq whose publish and every publish
before it JetStream acknowledged) is written atomically to `nats-published.json` in the data
folder at most every CURSOR_SAVE_SECS while acknowledgements flow (two fsyncs each, on the
disk the journal's commits use) and whenever nothing is in flight, and publishing
resumes from it.

A stream ack is not an fsync (JetStream syncs every 2 min by default), so on start and after
every reconnect the stream's last message of each own journal is compared with the cursor: a
stream that lost acknowledged envelopes gets them again. A journal the stream holds nothing of
(its messages aged out, or all were lost) resumes at the cursor; receivers repair any gap over
HTTP (nats_repair.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from pathlib import Path

import msgspec
from nats.errors import MaxPayloadError
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from eventstore.envelope import Envelope
from node.context import NodeContext
from node.files import write_atomically
from node.sync.nats_metrics import NatsMetrics
from node.sync.nats_raw import STATUS_PREFIX, RawClient, hpub_frame
from node.sync.nats_subjects import MSG_ID_HEADER, msg_id, seq_of_msg_id, stream_name, subject
from projections.journals import Journals

log = logging.getLogger("agent-node.sync")
CURSOR_FILE = "nats-published.json"
CURSOR_SAVE_SECS = 1.0
IDLE_CHECK_SECS = 5.0
ACK_TIMEOUT_SECS = 10.0
_encoder = msgspec.json.Encoder()


def encode_envelope(envelope: Envelope) -> bytes:
    """One envelope as an HTTP push carries it (wire.encode_push, one item)."""
    return _encoder.encode(envelope.as_pushed())


class Cursor:
    """journal → last seq acknowledged by JetStream, durable across kill -9."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.acked: dict[str, int] = {}
        try:
            loaded = json.loads(path.read_text())
            self.acked = {str(k): int(v) for k, v in loaded.items()}
        except FileNotFoundError:
            pass
        except (ValueError, TypeError, AttributeError):
            log.warning("nats: %s is unreadable; republishing from the stream's heads", path)

    def encoded(self) -> bytes:
        return json.dumps(self.acked, sort_keys=True).encode()

    def save(self) -> None:
        write_atomically(self.path, self.encoded())


class _PubAck(msgspec.Struct):
    """JetStream's answer to a publish: where it stored it, or why not."""

    stream: str = ""
    seq: int = 0
    duplicate: bool = False
    error: dict[str, object] | None = None


_ack_decoder = msgspec.json.Decoder(_PubAck)


class _InFlight:
    """The publishes of one journal not yet acknowledged, in publish order."""

    __slots__ = ("done", "seqs")

    def __init__(self) -> None:
        self.seqs: deque[int] = deque()
        self.done: set[int] = set()


class NatsPublisher:
    def __init__(
        self, ctx: NodeContext, nc: RawClient, js: JetStreamContext, metrics: NatsMetrics
    ) -> None:
        self._ctx = ctx
        self._nc = nc
        self._js = js
        self._metrics = metrics
        self._mesh = ctx.config.mesh
        self._stream = stream_name(self._mesh.name)
        self.cursor = Cursor(ctx.config.data_path / CURSOR_FILE)
        self._next: dict[str, int] = {}  # journal → last seq published (or to publish after)
        self._reconcile = asyncio.Event()
        self._reconcile.set()
        self._inbox = ""
        self._tokens: dict[bytes, tuple[str, int]] = {}  # reply token → (journal, seq)
        self._flight: dict[str, _InFlight] = {}
        self._in_flight = 0
        self._acked_unsaved = 0
        self._saved_at = 0.0
        self._failure = ""
        self._progress = asyncio.Event()
        self._counter = 0

    def reconnected(self) -> None:
        """The connection came back (maybe to a server that lost data): compare again."""
        self._reconcile.set()

    def own_journals(self) -> dict[str, int]:
        journals = self._ctx.projections.get(Journals)
        me = self._ctx.name
        return {
            stream: head
            for stream, head in journals.head.items()
            if not stream.startswith("$") and journals.home.get(stream) == me
        }

    async def run(self) -> None:
        self._inbox = self._nc.new_inbox() + "."
        sid = await self._nc.raw_subscribe(self._inbox + "*", self._on_ack)
        try:
            await self._loop()
        finally:
            await self._nc.raw_unsubscribe(sid)

    async def _loop(self) -> None:
        store = self._ctx.store
        window = self._mesh.publish_window
        while True:
            self._check()
            if self._reconcile.is_set() and not self._in_flight:
                self._reconcile.clear()
                await self._compare_with_stream()
            position = store.last_position
            room = window - self._in_flight
            work = {j: h for j, h in self.own_journals().items() if h > self._next.get(j, 0)}
            if work and room >= min(window, max(1, window // 4)):
                await self._publish(await asyncio.to_thread(self._read, work, room))
                continue
            if self._in_flight:
                await self._wait_for_acks()
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(store.wait_beyond(position), IDLE_CHECK_SECS)

    async def _publish(self, envelopes: list[Envelope]) -> None:
        mesh, me, inbox = self._mesh.name, self._ctx.name, self._inbox.encode()
        frames: list[bytes] = []
        size = 0
        for envelope in envelopes:
            self._counter += 1
            token = b"%d" % self._counter
            self._tokens[token] = (envelope.stream, envelope.seq)
            self._flight.setdefault(envelope.stream, _InFlight()).seqs.append(envelope.seq)
            self._next[envelope.stream] = envelope.seq
            self._in_flight += 1
            payload = encode_envelope(envelope)
            if len(payload) > self._nc.max_payload:
                raise MaxPayloadError(f"{envelope.stream}#{envelope.seq}: {len(payload)} bytes")
            size += len(payload)
            header = f"{MSG_ID_HEADER}: {msg_id(envelope.stream, envelope.seq)}".encode()
            frames.append(
                hpub_frame(
                    subject(mesh, me, envelope.stream).encode(), inbox + token, header, payload
                )
            )
        await self._nc.publish_frames(frames, size)
        self._metrics.pending_publishes.set(self._in_flight)

    async def _wait_for_acks(self) -> None:
        """Until some acknowledgement comes (then save the cursor, at most every
        CURSOR_SAVE_SECS, or when all are in); none for ACK_TIMEOUT_SECS: the connection is
        not well."""
        self._progress.clear()
        started = time.monotonic()
        try:
            await asyncio.wait_for(self._progress.wait(), ACK_TIMEOUT_SECS)
        except TimeoutError:
            waited = time.monotonic() - started
            raise ConnectionError(
                f"{self._in_flight} publish(es) not acknowledged in {waited:.0f} s"
            ) from None
        self._check()
        now = time.monotonic()
        due = now - self._saved_at >= CURSOR_SAVE_SECS
        if self._acked_unsaved and (due or not self._in_flight):
            self._acked_unsaved, self._saved_at = 0, now
            # encoded here: acknowledgements change the cursor while the thread writes
            await asyncio.to_thread(write_atomically, self.cursor.path, self.cursor.encoded())

    def _check(self) -> None:
        """A refused publish: what was acknowledged before it is saved, the rest goes again
        (in order) after the link starts over."""
        if self._failure:
            failure, self._failure = self._failure, ""
            self.cursor.save()
            raise ConnectionError(failure)

    def _on_ack(self, subject: bytes, reply: bytes, data: bytes, headers: bytes) -> None:
        where = self._tokens.pop(subject[len(self._inbox) :], None)
        if where is None:
            return  # an answer to a publish of an earlier connection
        journal, seq = where
        self._in_flight -= 1
        self._progress.set()
        if headers.startswith(STATUS_PREFIX):  # 503: no stream took it
            self._fail(journal, seq, headers.split(b"\r\n", 1)[0].decode(errors="replace"))
            return
        try:
            ack = _ack_decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            self._fail(journal, seq, f"unreadable acknowledgement: {exc}")
            return
        if ack.error is not None or ack.stream != self._stream:
            self._fail(journal, seq, f"refused: {ack.error or ack.stream}")
            return
        flight = self._flight[journal]
        flight.done.add(seq)
        while flight.seqs and flight.seqs[0] in flight.done:
            done = flight.seqs.popleft()
            flight.done.discard(done)
            self.cursor.acked[journal] = done
            self._acked_unsaved += 1
            self._metrics.published.inc()
        self._metrics.pending_publishes.set(self._in_flight)

    def _fail(self, journal: str, seq: int, why: str) -> None:
        log.warning("nats: publish of %s#%d failed: %s", journal, seq, why)
        self._failure = self._failure or f"publish of {journal}#{seq} failed: {why}"

    async def _compare_with_stream(self) -> None:
        """Resume each own journal at the stream's last message of it (lower than the cursor:
        the stream lost acknowledged envelopes; republish them), else at the cursor."""
        for journal in self.own_journals():
            acked = self.cursor.acked.get(journal, 0)
            try:
                last = await self._js.get_last_msg(
                    self._stream, subject(self._mesh.name, self._ctx.name, journal)
                )
                held = seq_of_msg_id((last.headers or {}).get(MSG_ID_HEADER, "")) or acked
            except NotFoundError:
                held = acked
            if held < acked:
                log.warning(
                    "nats: the stream holds %s up to %d, this node had %d acknowledged; "
                    "republishing the rest",
                    journal,
                    held,
                    acked,
                )
            self._next[journal] = held

    def _read(self, work: dict[str, int], room: int) -> list[Envelope]:
        """Up to `room` envelopes to publish next, shared between the journals with work."""
        share = max(1, room // len(work))
        out: list[Envelope] = []
        for journal in work:
            out += self._ctx.store.read_stream(journal, self._next.get(journal, 0), share)
        return out
