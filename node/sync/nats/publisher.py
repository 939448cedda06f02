"""The home node's side: publish each own envelope once, in order, to the mesh's stream.

A message holds a run of consecutive envelopes of one journal (what one read of the journal
gives: a commit's batch when writes are live, up to MESSAGE_MAX_BYTES of a backlog), as a JSON
array of the objects an HTTP push carries (the spec's "as pushed"), with `Nats-Msg-Id` =
`<origin>:<journal>:<first>-<last>` so that a re-publish after a crash is dropped by the server
(inside its duplicate window). The server de-duplicates per stream, not per subject, so a
member could publish this node's next id first (on its own subject) and have the real message
dropped: every `duplicate` answer is checked against the message the stream holds under that
sequence, and one that is not this node's (another subject, other bytes) is reported as a
finding naming its publisher, and the journal is published again from there under fresh ids
(a random suffix), in order. Publishes are asynchronous and overlap their acknowledgements:
up to `publish_window` envelopes are in flight, and more are read and sent as
acknowledgements come back (not a window at a time). Acknowledgements come to a private
inbox as raw bytes (nats/raw.py; nats-py's `publish_async` made a future, a Msg and a PubAck
dataclass per message). The cursor (per journal, the last seq whose publish and every publish
before it JetStream acknowledged) is written atomically to `nats-published.json` in the data
folder at most every CURSOR_SAVE_SECS while acknowledgements flow (two fsyncs each, on the
disk the journal's commits use) and whenever nothing is in flight, and publishing
resumes from it.

A stream ack is not an fsync (JetStream syncs every 2 min by default), so on start and after
every reconnect the stream's last message of each own journal is compared with the cursor: a
stream that lost acknowledged envelopes gets them again. A journal the stream holds nothing of
(its messages aged out, or all were lost) resumes at the cursor; receivers repair any gap over
HTTP (nats/repair.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import secrets
import time

import msgspec
from nats.errors import MaxPayloadError
from nats.js.errors import NotFoundError

from eventstore.envelope import Envelope
from node.sync.nats.cursor import CURSOR_FILE, CURSOR_SAVE_SECS, Cursor
from node.sync.nats.link import Link, OnLink
from node.sync.nats.raw import STATUS_PREFIX, hpub_frame
from node.sync.nats.subjects import (
    MSG_ID_HEADER,
    msg_id,
    parse_subject,
    seq_of_msg_id,
    stream_name,
    subject,
)
from projections.journals import Journals

log = logging.getLogger("agent-node.sync")
IDLE_CHECK_SECS = 5.0
ACK_TIMEOUT_SECS = 10.0
# a message's bytes at most (and at most the server's max_payload and the stream's
# max_msg_size, less HEADER_ROOM): large enough that a backlog goes in a few hundred envelopes
# a message, small enough that a receiver's batch holds several publishers' messages
MESSAGE_MAX_BYTES = 256 * 1024
HEADER_ROOM = 512
_encoder = msgspec.json.Encoder()


def _unfenced(deadline: float | None, now: float) -> bool:
    return deadline is None or now <= deadline


def encode_envelope(envelope: Envelope) -> bytes:
    """One envelope as an HTTP push carries it (wire.encode_push, one item)."""
    return _encoder.encode(envelope.as_pushed())


class _PubAck(msgspec.Struct):
    """JetStream's answer to a publish: where it stored it, or why not."""

    stream: str = ""
    seq: int = 0
    duplicate: bool = False
    error: dict[str, object] | None = None


_ack_decoder = msgspec.json.Decoder(_PubAck)


class _Message:
    """One published message: a run of one journal's envelopes, kept until acknowledged (a
    `duplicate` answer is compared with what the stream holds)."""

    __slots__ = ("first", "journal", "last", "payload")

    def __init__(self, journal: str, first: int, last: int, payload: bytes) -> None:
        self.journal = journal
        self.first = first
        self.last = last
        self.payload = payload

    @property
    def count(self) -> int:
        return self.last - self.first + 1


class NatsPublisher(OnLink):
    def __init__(self, link: Link) -> None:
        super().__init__(link)
        ctx = link.ctx
        self._mesh = ctx.config.mesh
        self._stream = stream_name(self._mesh.name)
        self.cursor = Cursor(ctx.config.data_path / CURSOR_FILE)
        self._next: dict[str, int] = {}  # journal → last seq published (or to publish after)
        self._reconcile = asyncio.Event()
        self._reconcile.set()
        self._inbox = ""
        self._tokens: dict[bytes, _Message] = {}  # reply token → the message it answers
        # journal → ranges (first, last) acknowledged beyond the cursor, smallest first: the
        # cursor moves over them once every seq before them is acknowledged
        self._ahead: dict[str, list[tuple[int, int]]] = {}
        self._suspects: list[tuple[_Message, int]] = []  # answered `duplicate`: to check
        self._salt: dict[str, str] = {}  # journal → suffix of its ids after a collision
        self._in_flight = 0  # envelopes
        self._message_limit = MESSAGE_MAX_BYTES
        self._acked_unsaved = 0
        self._saved_at = 0.0
        self._failure = ""
        self._progress = asyncio.Event()
        self._counter = 0
        # journal → (seq, future) of writers waiting for that seq's publish ack (placed agents)
        self._waiters: dict[str, list[tuple[int, asyncio.Future[None]]]] = {}

    async def wait_published(self, journal: str, seq: int, timeout: float) -> bool:
        """Whether the stream acknowledged `journal` through `seq` within `timeout` seconds
        (a placed agent's write counts only once the stream holds it)."""
        if self.cursor.acked.get(journal, 0) >= seq:
            return True
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(journal, []).append((seq, future))
        try:
            await asyncio.wait_for(future, timeout)
            return True
        except TimeoutError:
            return False
        finally:
            waiting = self._waiters.get(journal, [])
            with contextlib.suppress(ValueError):
                waiting.remove((seq, future))

    def _wake(self, journal: str, acked: int) -> None:
        for seq, future in self._waiters.get(journal, ()):
            if seq <= acked and not future.done():
                future.set_result(None)

    def reconnected(self) -> None:
        """The connection came back (maybe to a server that lost data): compare again."""
        self._reconcile.set()

    def own_journals(self) -> dict[str, int]:
        journals = self._ctx.projections.get(Journals)
        me = self._ctx.name
        fence_of, now = self._ctx.store.fence_of, time.monotonic()  # eventstore's write fence
        own = {
            stream: head
            for stream, head in journals.head.items()
            if not stream.startswith("$")
            and journals.home_of(stream) == me
            and _unfenced(fence_of(stream), now)  # a lease lost: not one more envelope
        }
        for stream, moves in journals.moves.items():  # handed over: through the handoff
            last = moves[-1]
            if last["reason"] == "handoff" and last["from"] == me and stream not in own:
                own[stream] = min(journals.head.get(stream, 0), int(last["seq"]))
        return own

    async def run(self) -> None:
        self._inbox = self._nc.new_inbox() + "."
        self._message_limit = await self._limit()
        sid = await self._nc.raw_subscribe(self._inbox + "*", self._on_ack)
        try:
            await self._loop()
        finally:
            await self._nc.raw_unsubscribe(sid)

    async def _limit(self) -> int:
        """A message's bytes at most: the server's and the stream's limits bound it too."""
        limit = min(MESSAGE_MAX_BYTES, self._nc.max_payload - HEADER_ROOM)
        info = await self._js.stream_info(self._stream)
        stream_max = info.config.max_msg_size or -1
        if stream_max > 0:
            limit = min(limit, stream_max - HEADER_ROOM)
        return max(1, limit)

    async def _loop(self) -> None:
        store = self._ctx.store
        window = self._mesh.publish_window
        while True:
            self._check()
            if self._suspects:
                await self._check_duplicates()
            if self._reconcile.is_set() and not self._in_flight:
                self._reconcile.clear()
                await self._compare_with_stream()
            position = store.last_position
            room = window - self._in_flight
            work = {j: h for j, h in self.own_journals().items() if h > self._after(j)}
            if work and room >= min(window, max(1, window // 4)):
                await self._publish(await asyncio.to_thread(self._read, work, room))
                continue
            if self._in_flight:
                await self._wait_for_acks()
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(store.wait_beyond(position), IDLE_CHECK_SECS)

    async def _publish(self, envelopes: list[Envelope]) -> None:
        """Runs of consecutive envelopes of one journal, each run cut into messages of at most
        the message limit, sent as HPUB frames in one write."""
        frames: list[bytes] = []
        size = 0
        parts: list[bytes] = []
        run_bytes = 1  # the array's bytes so far: `[`, each part and a `,` or `]` after it
        first: Envelope | None = None
        previous: Envelope | None = None
        for envelope in envelopes:
            encoded = encode_envelope(envelope)
            if (
                previous is not None
                and first is not None
                and (
                    envelope.stream != previous.stream
                    or envelope.seq != previous.seq + 1
                    or run_bytes + len(encoded) + 1 > self._message_limit
                )
            ):
                size += self._frame(frames, first, previous, parts)
                parts, run_bytes = [], 1
            if not parts:
                first = envelope
            parts.append(encoded)
            run_bytes += len(encoded) + 1
            previous = envelope
        if previous is not None and first is not None:
            size += self._frame(frames, first, previous, parts)
        if not frames:
            return
        await self._nc.publish_frames(frames, size)
        self._metrics.pending_publishes.set(self._in_flight)

    def _frame(
        self, frames: list[bytes], first: Envelope, last: Envelope, parts: list[bytes]
    ) -> int:
        """Queue one message of first..last (encoded `parts`); its payload's size."""
        journal = first.stream
        payload = b"[" + b",".join(parts) + b"]"
        if len(payload) > self._nc.max_payload - HEADER_ROOM:  # one envelope alone
            raise MaxPayloadError(f"{journal}#{first.seq}: {len(payload)} bytes")
        self._counter += 1
        token = b"%d" % self._counter
        message = _Message(journal, first.seq, last.seq, payload)
        self._tokens[token] = message
        self._next[journal] = last.seq
        self._in_flight += message.count
        identity = msg_id(self._ctx.name, journal, first.seq, last.seq) + self._salt.get(
            journal, ""
        )
        frames.append(
            hpub_frame(
                subject(self._mesh.name, self._ctx.name, journal).encode(),
                self._inbox.encode() + token,
                f"{MSG_ID_HEADER}: {identity}".encode(),
                payload,
            )
        )
        return len(payload)

    async def _wait_for_acks(self) -> None:
        """Until some acknowledgement comes (then save the cursor, at most every
        CURSOR_SAVE_SECS, or when all are in); none for ACK_TIMEOUT_SECS: the connection is
        not well."""
        if self._suspects:
            return  # answered, to be checked first
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
            await asyncio.to_thread(self.cursor.write, self.cursor.encoded())

    def _check(self) -> None:
        """A refused publish: what was acknowledged before it is saved, the rest goes again
        (in order) after the link starts over."""
        if self._failure:
            failure, self._failure = self._failure, ""
            self.cursor.save()
            raise ConnectionError(failure)

    def _on_ack(self, subject: bytes, reply: bytes, data: bytes, headers: bytes) -> None:
        message = self._tokens.pop(subject[len(self._inbox) :], None)
        if message is None:
            return  # an answer to a publish of an earlier connection
        self._progress.set()
        if headers.startswith(STATUS_PREFIX):  # 503: no stream took it
            self._in_flight -= message.count
            self._fail(message, headers.split(b"\r\n", 1)[0].decode(errors="replace"))
            return
        try:
            ack = _ack_decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            self._in_flight -= message.count
            self._fail(message, f"unreadable acknowledgement: {exc}")
            return
        if ack.error is not None or ack.stream != self._stream:
            self._in_flight -= message.count
            self._fail(message, f"refused: {ack.error or ack.stream}")
            return
        if ack.duplicate:
            self._suspects.append((message, ack.seq))  # ours, or an id someone took first?
            return
        self._done(message)

    def _done(self, message: _Message) -> None:
        """The stream holds `message`: the cursor moves over every seq acknowledged in order."""
        self._in_flight -= message.count
        self._metrics.published.inc(message.count)
        self._metrics.published_messages.inc()
        journal = message.journal
        ahead = self._ahead.setdefault(journal, [])
        heapq.heappush(ahead, (message.first, message.last))
        acked = before = self.cursor.acked.get(journal, 0)
        while ahead and ahead[0][0] <= acked + 1:
            acked = max(acked, heapq.heappop(ahead)[1])
        if acked != before:
            self.cursor.acked[journal] = acked
            self._acked_unsaved += 1
            if journal in self._waiters:
                self._wake(journal, acked)
        self._metrics.pending_publishes.set(self._in_flight)

    def _fail(self, message: _Message, why: str) -> None:
        what = f"{message.journal}#{message.first}-{message.last}"
        log.warning("nats: publish of %s failed: %s", what, why)
        self._failure = self._failure or f"publish of {what} failed: {why}"

    async def _check_duplicates(self) -> None:
        """A `duplicate` answer names the stream message holding the id: this node's own
        earlier publish (the same subject and bytes: a re-publish after a crash) is
        acknowledged; anything else took the id first. Then the journal goes again from the
        taken message under fresh ids, and a finding names whoever published it."""
        suspects, self._suspects = self._suspects, []
        own: dict[str, str] = {}
        for message, stream_seq in suspects:
            mine = own.setdefault(
                message.journal, subject(self._mesh.name, self._ctx.name, message.journal)
            )
            try:
                held = await self._js.get_msg(self._stream, seq=stream_seq)
                held_subject, held_data = held.subject or "", held.data or b""
            except NotFoundError:  # gone since (retention): nothing to compare; publish again
                held_subject, held_data = "", b""
            if held_subject == mine and held_data == message.payload:
                self._done(message)
                continue
            self._in_flight -= message.count
            self._salt[message.journal] = "~" + secrets.token_hex(8)
            self._next[message.journal] = min(self._next.get(message.journal, 0), message.first - 1)
            if held_subject:
                await self._report_collision(
                    message, stream_seq, held_subject, held_subject == mine
                )
        self._metrics.pending_publishes.set(self._in_flight)

    async def _report_collision(
        self, message: _Message, stream_seq: int, held_subject: str, on_own_subject: bool
    ) -> None:
        parsed = parse_subject(self._mesh.name, held_subject)
        member = parsed[0][:100] if parsed else "(not a mesh subject)"
        peers = {p.name for p in self._ctx.config.peers}
        keyed = member if member in peers else "(nats)"  # only configured names key incidents
        what = f"{message.journal}#{message.first}-{message.last}"
        detail = (
            f"JetStream answered the publish of {what} as a duplicate of stream message "
            f"{stream_seq}, published by {member} on {held_subject[:300]}"
            + (
                " (this node's own subject with other bytes: check the NATS permissions)"
                if on_own_subject
                else ""
            )
            + f"; {message.journal} is published again from seq {message.first} under fresh ids"
        )
        log.warning("nats: message id of %s taken by %s; publishing it again", what, member)
        await self._incidents.report(
            f"nats-msg-id-taken/{keyed}/{message.journal}",
            "high",
            f"message id of {what} taken on the mesh stream by {member}",
            detail[:1000],
        )

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
            held = max(held, self._moved_in_at(journal))
            if held < acked:
                log.warning(
                    "nats: the stream holds %s up to %d, this node had %d acknowledged; "
                    "republishing the rest",
                    journal,
                    held,
                    acked,
                )
            self._next[journal] = held

    def _after(self, journal: str) -> int:
        """The seq after which `journal` is published next: a journal that moved to this node
        (a handoff or takeover, projections/journals.py) is published from the first seq this
        node wrote, never its earlier homes' envelopes on this node's subject."""
        known = self._next.get(journal)
        if known is None or journal in self._ctx.projections.get(Journals).moves:
            start = self.cursor.acked.get(journal, 0) if known is None else known
            moved_in = self._moved_in_at(journal)
            known = self._next[journal] = max(start, moved_in)
            if moved_in > self.cursor.acked.get(journal, 0):  # earlier homes' seqs: not ours
                self.cursor.acked[journal] = moved_in
        return known

    def _moved_in_at(self, journal: str) -> int:
        for move in reversed(self._ctx.projections.get(Journals).moves_of(journal)):
            if move["to"] == self._ctx.name:
                seq = int(move["seq"])
                return seq if move["reason"] == "handoff" else seq - 1
        return 0

    def _read(self, work: dict[str, int], room: int) -> list[Envelope]:
        """Up to `room` envelopes to publish next, shared between the journals with work."""
        share = max(1, room // len(work))
        out: list[Envelope] = []
        for journal in work:
            out += self._ctx.store.read_stream(journal, self._after(journal), share)
        return out
