"""Every node's heads in the mesh's key-value bucket: the convergence report without probes.

Each node puts its heads of every replicated journal (key: hex of its name, value:
`{"node", "heads"}`) when they change, at most every `heads_interval_secs`, and reads the
configured peers' records as often. A configured peer's heads become its acknowledgements
(acks.py: the convergence report, `agent-node status` and the console's peers view read them as
with HTTP), recorded like the HTTP replicator's: only journals this node holds, never beyond
its own head. All reported heads are kept for the repair check (a journal someone holds
further than this node).
"""

from __future__ import annotations

import asyncio
import logging

import msgspec
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from node.context import NodeContext
from node.sync.acks import AckRecorder
from node.sync.nats_subjects import name_of, token
from projections.journals import Journals

log = logging.getLogger("agent-node.sync")
MAX_HEADS_BYTES = 1 << 20


class HeadsRecord(msgspec.Struct):
    node: str
    heads: dict[str, int]


_decoder = msgspec.json.Decoder(HeadsRecord)


class HeadsBoard:
    def __init__(self, ctx: NodeContext, kv: KeyValue, acks: AckRecorder) -> None:
        self._ctx = ctx
        self._kv = kv
        self._acks = acks
        self._peers = {p.name for p in ctx.config.peers}
        self.reported: dict[str, dict[str, int]] = {}  # configured peer → its heads

    def own_heads(self) -> dict[str, int]:
        heads = self._ctx.projections.get(Journals).head
        return {s: q for s, q in heads.items() if not s.startswith("$")}

    async def publish(self) -> None:
        last: dict[str, int] | None = None
        interval = self._ctx.config.mesh.heads_interval_secs
        while True:
            heads = self.own_heads()
            if heads != last:
                record = HeadsRecord(self._ctx.name, heads)
                await self._kv.put(token(self._ctx.name), msgspec.json.encode(record))
                last = heads
            await asyncio.sleep(interval)

    async def watch(self) -> None:
        """Read each configured peer's record every interval. (A KV watcher, an ordered push
        consumer, was seen to stop delivering under load; a direct get per peer cannot.)"""
        interval = self._ctx.config.mesh.heads_interval_secs
        seen: dict[str, bytes] = {}
        while True:
            for peer in self._peers:
                key = token(peer)
                try:
                    entry = await self._kv.get(key)
                except KeyNotFoundError:
                    continue
                if entry.value is None or entry.value == seen.get(key):
                    continue
                seen[key] = entry.value
                if len(entry.value) <= MAX_HEADS_BYTES:
                    self.take(key, entry.value)
            await asyncio.sleep(interval)

    def take(self, key: str, value: bytes) -> None:
        try:
            record = _decoder.decode(value)
            named = name_of(key)
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError):
            return
        if record.node != named or named not in self._peers:
            return
        self.reported[named] = record.heads
        held = self._ctx.projections.get(Journals).head
        self._acks.note(
            named, {s: min(q, held[s]) for s, q in record.heads.items() if s in held and q >= 0}
        )
