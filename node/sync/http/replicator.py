"""One task per peer: push every journal homed here after the peer's acked seq, in order.

The peer's `heads` are the truth: an empty push (a probe) on every (re)contact and every
heartbeat learns them, so a restart of either side resumes at the right seq without trusting
anything persisted. Up to `pushes_in_flight` pushes are outstanding at once, each holding
journals no other outstanding push holds: the peer may verify one while it commits another, and
they may complete in any order, because no journal's envelopes are split between two of them
(a journal's next batch goes out only once its previous one was answered). The next batch is
read and encoded optimistically, assuming those outstanding land. Unreachable peer, refused or
progress-less push: retry with exponential backoff (with jitter), then re-probe.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Set as AbstractSet
from typing import NamedTuple

import aiohttp

from eventstore.envelope import Envelope
from node.config.model import Peer
from node.context import NodeContext
from node.sync.acks import AckRecorder
from node.sync.keys import PeerKeys
from node.sync.wire import MAX_REPLY_BYTES, PushReply, decode_reply, encode_push, read_capped
from projections.journals import Journals

log = logging.getLogger("agent-node.sync")
SYNC_PATH = "/api/v1/sync/envelopes"
_PER_ENVELOPE_OVERHEAD = 160  # JSON keys, seq, agent and the base64 signature, roughly


class PushFailed(Exception):
    """The peer answered, but the push made no progress (refused, or every envelope rejected)."""


class Batch(NamedTuple):
    last: dict[str, int]  # stream → last seq in this batch
    envelope_count: int  # how many the body carries (`count` would shadow tuple.count)
    body: bytes


class Replicator:
    def __init__(
        self,
        ctx: NodeContext,
        peer: Peer,
        http: aiohttp.ClientSession,
        keys: PeerKeys,
        acks: AckRecorder,
    ) -> None:
        self._ctx = ctx
        self.peer = peer
        self._http = http
        self._keys = keys
        self._acks = acks
        self._settings = ctx.config.sync
        self._url = peer.url.rstrip("/") + SYNC_PATH
        self._headers = {
            "Authorization": f"Bearer {peer.token}",
            "Content-Type": "application/json",
        }
        self._limit = self._settings.batch_size
        self._backoff = self._settings.backoff_initial_secs
        self._turn = 0
        self.acked: dict[str, int] = {}
        self.connected = False
        self.last_error = ""

    def use_token(self, token: str) -> None:
        """SIGHUP gave a new token for this peer: present it from the next request on."""
        self._headers = {**self._headers, "Authorization": f"Bearer {token}"}

    # ----------------------------------------------------------------- loop
    async def run(self) -> None:
        while True:
            try:
                await self._contact()
                await self._pump()
            except asyncio.CancelledError:
                raise
            except (aiohttp.ClientError, TimeoutError, OSError, ValueError, PushFailed) as exc:
                self._failed(exc)
            except Exception as exc:  # a bug must not end replication to this peer for good
                log.exception("sync to %s failed unexpectedly", self.peer.name)
                self.connected, self.last_error = False, repr(exc)
            delay = self._backoff * random.uniform(0.8, 1.2)
            self._backoff = min(self._backoff * 2, self._settings.backoff_max_secs)
            await asyncio.sleep(delay)

    def _failed(self, exc: BaseException) -> None:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if self.connected or text != self.last_error:
            log.warning("sync to %s: %s; retrying with backoff", self.peer.name, text)
        self.connected = False
        self.last_error = text

    async def _contact(self) -> None:
        """First contact (and every reconnect): check the peer's key, learn its heads."""
        await self._keys.check_did(self.peer)
        self._learn((await self._post(b"", 0)).heads, probe=True)
        if not self.connected:
            log.info("sync to %s: connected", self.peer.name)
        self.connected = True
        self.last_error = ""

    async def _pump(self) -> None:
        """Push until the peer has everything, wait for new commits, repeat; raise on failure."""
        store = self._ctx.store
        window = self._settings.pushes_in_flight
        cursor = dict(self.acked)  # what the peer will hold once every outstanding push lands
        in_flight: dict[asyncio.Task[PushReply], Batch] = {}
        try:
            while True:
                position = store.last_position
                while len(in_flight) < window:
                    busy = {s for batch in in_flight.values() for s in batch.last}
                    batch = await self._prepare(cursor, busy, window - len(in_flight))
                    if batch is None:
                        break
                    post = asyncio.create_task(self._post(batch.body, batch.envelope_count))
                    in_flight[post] = batch
                    cursor.update(batch.last)
                if not in_flight:
                    await self._idle(position)
                    cursor = dict(self.acked)
                    continue
                done, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                for post in done:
                    self._answered(in_flight.pop(post), post.result(), cursor)
        finally:  # a failed push ends the others; their outcomes are re-learned by a probe
            for post in in_flight:
                if post.done() and not post.cancelled():
                    post.exception()  # retrieved: it is superseded by the failure being raised
                post.cancel()

    async def _idle(self, position: int) -> None:
        """Nothing to push: wait for a commit beyond `position`, probing at each heartbeat."""
        self._backoff = self._settings.backoff_initial_secs
        try:
            await asyncio.wait_for(
                self._ctx.store.wait_beyond(position), self._settings.heartbeat_secs
            )
        except TimeoutError:
            self._learn((await self._post(b"", 0)).heads, probe=True)

    def _answered(self, batch: Batch, reply: PushReply, cursor: dict[str, int]) -> None:
        """Take a push's reply; where the peer holds other than assumed, resume from its heads."""
        self._learn(reply.heads)
        if reply.accepted == 0 and reply.rejected:
            raise PushFailed(
                f"all {reply.rejected} envelope(s) rejected, first {reply.first_rejection()}"
            )
        self._backoff = self._settings.backoff_initial_secs
        if reply.rejected == 0 and all(self.acked.get(s) == q for s, q in batch.last.items()):
            return
        for stream in batch.last:  # only this push's journals: the others' pushes are theirs
            cursor[stream] = self.acked.get(stream, 0)

    # ----------------------------------------------------------------- batches
    async def _prepare(
        self, after: dict[str, int], busy: AbstractSet[str] = frozenset(), slots: int = 1
    ) -> Batch | None:
        """The next batch after `after`, read and encoded off the loop; None when all acked.

        Journals in `busy` (in an outstanding push) are left out; of the rest, a batch takes
        its share of `slots` free pushes, so the journals spread over the window."""
        journals = self._ctx.projections.get(Journals)
        me = self._ctx.name
        work = [
            (stream, after.get(stream, 0))
            for stream, head in journals.head.items()
            if head > after.get(stream, 0)
            and stream not in busy
            and not stream.startswith("$")
            and journals.home.get(stream) == me
        ]
        if not work:
            return None
        self._turn = (self._turn + 1) % len(work)
        work = work[self._turn :] + work[: self._turn]  # no journal starves the others
        work = work[: -(-len(work) // max(1, slots))]
        return await asyncio.to_thread(self._read_batch, work)

    def _read_batch(self, work: list[tuple[str, int]]) -> Batch:
        """Up to `_limit` envelopes and about `batch_max_kb`, shared fairly between journals
        (several journals per push let the receiver verify them in parallel)."""
        envelopes: list[Envelope] = []
        size, max_bytes = 0, self._settings.batch_max_kb * 1024
        share = -(-self._limit // len(work))  # ceil
        after = dict(work)
        for round_limit in (share, self._limit):  # a fair share each, then fill up
            for stream, _ in work:
                room = min(round_limit, self._limit - len(envelopes))
                if room <= 0 or size >= max_bytes:
                    break
                for envelope in self._ctx.store.read_stream(stream, after[stream], room):
                    cost = len(envelope.payload) * 4 // 3 + _PER_ENVELOPE_OVERHEAD
                    if envelopes and size + cost > max_bytes:
                        size = max_bytes
                        break
                    envelopes.append(envelope)
                    after[stream] = envelope.seq
                    size += cost
        envelopes.sort(key=lambda e: (e.stream, e.seq))
        last = {e.stream: e.seq for e in envelopes}
        return Batch(last, len(envelopes), encode_push(self._ctx.name, envelopes))

    # ----------------------------------------------------------------- wire
    async def _post(self, body: bytes, count: int) -> PushReply:
        """POST one push (`count` envelopes; an empty body is a probe)."""
        data = body or encode_push(self._ctx.name, ())
        timeout = aiohttp.ClientTimeout(total=self._settings.request_timeout_secs)
        async with self._http.post(
            self._url, data=data, headers=self._headers, timeout=timeout
        ) as response:
            raw = await read_capped(response, MAX_REPLY_BYTES)
            if response.status == 413 and count > 1:
                self._limit = max(1, count // 2)
                raise PushFailed(f"batch of {count} too large for the peer; now {self._limit}")
            if response.status != 200:
                detail = raw[:300].decode(errors="replace")
                raise PushFailed(f"HTTP {response.status}: {detail}")
        reply = decode_reply(raw)
        self._ctx.metrics.sync_envelopes.inc(count)
        return reply

    def _learn(self, heads: dict[str, int], *, probe: bool = False) -> None:
        """Take the peer's word for its heads of our journals (all of them after a probe); of
        the rest, only journals this node holds are recorded, and no seq beyond our head."""
        journals = self._ctx.projections.get(Journals)
        me = self._ctx.name
        ours = {s for s, home in journals.home.items() if home == me and not s.startswith("$")}
        held = journals.head
        heads = {s: min(q, held[s]) for s, q in heads.items() if s in held and q >= 0}
        if probe:
            self.acked = {s: heads.get(s, 0) for s in ours}
            self._acks.note(self.peer.name, {**dict.fromkeys(ours, 0), **heads})
            return
        for stream, seq in heads.items():
            if stream in ours:
                self.acked[stream] = seq
        self._acks.note(self.peer.name, heads)
