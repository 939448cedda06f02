"""Every node's heads in the mesh's key-value bucket: the convergence report without probes.

Each node puts its heads of every replicated journal (key: hex of its name, value:
`{"node", "heads"}`) when they change, at most every `heads_interval_secs`, and reads the
configured peers' records as often. A configured peer's heads become its acknowledgements
(acks.py: the convergence report, `agent-node status` and the console's peers view read them as
with HTTP), recorded like the HTTP replicator's: only journals this node holds, never beyond
its own head. What a record may trigger a repair for is decided by the claim book
(nats_claims.py): a record is a peer's claim, checked and bounded, not a fact. A record over
MAX_HEADS_BYTES or naming more than MAX_HEADS_JOURNALS journals is ignored whole.
"""

from __future__ import annotations

import asyncio
import logging
import time

import msgspec
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError
from nats.js.kv import KeyValue

from node.context import NodeContext
from node.sync.acks import AckRecorder
from node.sync.nats_claims import ClaimBook
from node.sync.nats_subjects import heads_bucket, name_of, token
from projections.journals import Journals

log = logging.getLogger("agent-node.sync")
MAX_HEADS_BYTES = 1 << 20
MAX_HEADS_JOURNALS = 100_000
REPUT_SECS = 10.0


class HeadsRecord(msgspec.Struct):
    node: str
    heads: dict[str, int]


_decoder = msgspec.json.Decoder(HeadsRecord)


class HeadsBoard:
    def __init__(
        self,
        ctx: NodeContext,
        js: JetStreamContext,
        kv: KeyValue,
        acks: AckRecorder,
        claims: ClaimBook,
    ) -> None:
        self._ctx = ctx
        self._js = js
        self._kv = kv
        self._bucket = heads_bucket(ctx.config.mesh.name)
        self._acks = acks
        self._peers = {p.name for p in ctx.config.peers}
        self._claims = claims
        # configured peer's key → (its record's revision, the record; None: ignored)
        self._decoded: dict[str, tuple[int, HeadsRecord | None]] = {}
        # the last turn of each loop (nats_mesh.py restarts the link when one stops turning)
        self.put_beat = self.read_beat = time.monotonic()

    @property
    def beat(self) -> float:
        return min(self.put_beat, self.read_beat)

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
            self.read_beat = time.monotonic()
            await asyncio.sleep(interval)

    async def watch(self) -> None:
        """Read each configured peer's record every interval. (A KV watcher, an ordered push
        consumer, was seen to stop delivering under load; a direct get per peer cannot.)"""
        interval = self._ctx.config.mesh.heads_interval_secs
        while True:
            for peer in self._peers:
                key = token(peer)
                try:
                    # from the stream's leader: a direct get may be answered by a replica
                    # that fell behind (seen for tens of seconds after a server was killed)
                    msg = await self._js.get_last_msg(
                        f"KV_{self._bucket}", f"$KV.{self._bucket}.{key}", direct=False
                    )
                except NotFoundError:
                    continue
                value = msg.data
                # taken again even when unchanged: acks are capped at this node's own heads,
                # which may have grown since (acks.py records only what changed)
                if value and len(value) <= MAX_HEADS_BYTES:
                    self.take(key, value, msg.seq or 0)
            self.read_beat = time.monotonic()
            await asyncio.sleep(interval)

    def take(self, key: str, value: bytes, revision: int = 0) -> None:
        cached = self._decoded.get(key)
        record: HeadsRecord | None
        if cached is not None and revision and cached[0] == revision:
            record = cached[1]  # the same record: not decoded again (it may be 1 MiB)
            if record is None:
                return
        else:
            try:
                record = _decoder.decode(value)
                named = name_of(key)
            except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError):
                return
            if record.node != named or named not in self._peers:
                return
            if len(record.heads) > MAX_HEADS_JOURNALS:
                log.warning(
                    "nats: %s's heads record names %d journals; ignored", named, len(record.heads)
                )
                self._decoded[key] = (revision, None)
                return
            self._decoded[key] = (revision, record)
        named = record.node
        self._claims.take(named, record.heads)
        held = self._ctx.projections.get(Journals).head
        self._acks.note(
            named, {s: min(q, held[s]) for s, q in record.heads.items() if s in held and q >= 0}
        )
