"""A peer's push: check each envelope, store those that extend their journal, say what was not.

Checks, in order: readable (seq, agent, base64 payload, `ed25519:` signature, decodable event),
not a node-level `$` journal, written by the journal's home (single writer), origin key known,
then in the store: hash and signature, seq = head + 1, chain. Equivocation (a different envelope
under a seq we hold) is also journaled as a critical finding.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec

from eventstore.envelope import decode_event, digest_of
from eventstore.store import ForeignEnvelope, ImportResult, ImportStatus
from node.context import NodeContext
from node.sync.acks import AckRecorder
from node.sync.incidents import Incidents
from node.sync.keys import PeerKeys
from node.sync.wire import MalformedEnvelope, agent_of, parse_envelope
from projections.keys import is_key_journal, key_journal

NODE_LEVEL = "node_level"
FOREIGN_WRITER = "foreign_writer"
log = logging.getLogger("agent-node.sync")
# Concurrent import requests per push (signature checks run on that many threads).
VERIFY_LANES = max(1, min(4, os.cpu_count() or 1))
MIN_LANE_SPLIT = 64


class Rejection(msgspec.Struct):
    index: int
    agent: str | None
    seq: int | None
    reason: str
    detail: str = ""


@dataclass
class PushOutcome:
    accepted: int = 0
    rejections: list[Rejection] = field(default_factory=list)
    heads: dict[str, int] = field(default_factory=dict)

    def as_reply(self) -> dict:
        return {
            "accepted": self.accepted,
            "rejected": len(self.rejections),
            "heads": self.heads,
            "rejections": msgspec.to_builtins(self.rejections),
        }


class Receiver:
    def __init__(
        self, ctx: NodeContext, keys: PeerKeys, incidents: Incidents, acks: AckRecorder
    ) -> None:
        self._ctx = ctx
        self._keys = keys
        self._incidents = incidents
        self._acks = acks
        self._peers = {p.name for p in ctx.config.peers}

    async def receive(self, peer_id: str, items: Sequence[msgspec.Raw]) -> PushOutcome:
        outcome = PushOutcome()
        candidates, origins = self._screen(items, outcome)
        await self._keys.ensure(origins)
        results = await self._import([item for _, item in candidates])
        held: dict[str, int] = {}
        for (index, item), result in zip(candidates, results, strict=True):
            if result.status in (ImportStatus.ACCEPTED, ImportStatus.DUPLICATE):
                held[item.stream] = max(held.get(item.stream, 0), item.seq)
            if result.status == ImportStatus.ACCEPTED:
                outcome.accepted += 1
                continue
            outcome.rejections.append(
                Rejection(index, item.stream, item.seq, result.status.value, result.detail)
            )
            if result.status == ImportStatus.EQUIVOCATION:
                await self._report_equivocation(peer_id, item)
        outcome.rejections.sort(key=lambda r: r.index)
        if outcome.rejections:
            _log_rejections(peer_id, outcome)
        outcome.heads = self._heads({item.stream for _, item in candidates}, bool(items))
        self._ctx.metrics.sync_envelopes.inc(len(items))
        if peer_id in self._peers and held:
            self._acks.note(peer_id, held, at_least=True)
        return outcome

    def _screen(
        self, items: Sequence[msgspec.Raw], outcome: PushOutcome
    ) -> tuple[list[tuple[int, ForeignEnvelope]], set[str]]:
        """Everything that needs neither key nor head; the rest goes to the store."""
        journals = self._ctx.projections["journals"]
        batch_home: dict[str, str] = {}
        candidates: list[tuple[int, ForeignEnvelope]] = []
        origins: set[str] = set()
        for index, raw in enumerate(items):
            try:
                item = parse_envelope(raw)
                event = decode_event(item.payload)
            except (MalformedEnvelope, msgspec.DecodeError, msgspec.ValidationError) as exc:
                agent, seq = agent_of(raw)
                reason = ImportStatus.MALFORMED.value
                outcome.rejections.append(Rejection(index, agent, seq, reason, str(exc)))
                continue
            if item.stream.startswith("$"):
                detail = "node-level journals are not replicated"
                outcome.rejections.append(
                    Rejection(index, item.stream, item.seq, NODE_LEVEL, detail)
                )
                continue
            if is_key_journal(item.stream) and item.stream != key_journal(event.origin):
                detail = f"{item.stream} is written by its node only, not by {event.origin!r}"
                outcome.rejections.append(
                    Rejection(index, item.stream, item.seq, FOREIGN_WRITER, detail)
                )
                continue
            home = journals.home_of(item.stream) or batch_home.get(item.stream)
            if home is None and item.seq == 1:
                batch_home[item.stream] = event.origin
            elif home is not None and event.origin != home:
                detail = f"journal is written by {home!r}, envelope by {event.origin!r}"
                outcome.rejections.append(
                    Rejection(index, item.stream, item.seq, FOREIGN_WRITER, detail)
                )
                continue
            origins.add(event.origin)
            candidates.append((index, item))
        return candidates, origins

    async def _import(self, items: list[ForeignEnvelope]) -> list[ImportResult]:
        """Import in up to VERIFY_LANES concurrent requests, each holding whole journals.

        Each request's signatures are checked on its own executor thread (libsodium releases
        the GIL) and no journal spans two requests, so their commit order does not matter.
        """
        lanes = _lanes(items)
        store, lookup = self._ctx.store, self._keys.lookup
        if len(lanes) == 1:
            return await store.import_envelopes(items, lookup)
        outs = await asyncio.gather(
            *(store.import_envelopes([items[i] for i in lane], lookup) for lane in lanes)
        )
        results: list[ImportResult | None] = [None] * len(items)
        for lane, out in zip(lanes, outs, strict=True):
            for index, result in zip(lane, out, strict=True):
                results[index] = result
        return [r for r in results if r is not None]

    def _heads(self, streams: set[str], any_items: bool) -> dict[str, int]:
        """Our heads of the pushed journals; an empty push (a probe) gets every journal's."""
        heads = self._ctx.projections["journals"].head
        if not any_items:
            return {s: seq for s, seq in heads.items() if not s.startswith("$")}
        return {s: heads.get(s, 0) for s in sorted(streams)}

    async def _report_equivocation(self, peer_id: str, item: ForeignEnvelope) -> None:
        stored = self._ctx.store.get(item.stream, item.seq)
        theirs = "sha256:" + digest_of(item.payload).hex()
        ours = stored.payload_hash if stored else "(none)"
        origin = stored.event.origin if stored else "?"
        await self._incidents.report(
            f"equivocation/{item.stream}/{item.seq}/{theirs}",
            "critical",
            f"equivocation in journal {item.stream} at seq {item.seq}",
            f"peer {peer_id} pushed {theirs}, this node holds {ours} signed by {origin}; "
            "the pushed envelope was rejected",
        )


def _lanes(items: Sequence[ForeignEnvelope]) -> list[list[int]]:
    """Indices of `items` split into balanced lanes of whole journals (one lane if small)."""
    by_stream: dict[str, list[int]] = {}
    for index, item in enumerate(items):
        by_stream.setdefault(item.stream, []).append(index)
    if len(items) < MIN_LANE_SPLIT or len(by_stream) == 1:
        return [list(range(len(items)))]
    lanes: list[list[int]] = [[] for _ in range(min(VERIFY_LANES, len(by_stream)))]
    for indices in sorted(by_stream.values(), key=len, reverse=True):
        min(lanes, key=len).extend(indices)
    return [sorted(lane) for lane in lanes]


def _log_rejections(peer_id: str, outcome: PushOutcome) -> None:
    """One line per push that had rejections: how many of each kind, and the first one."""
    kinds: dict[str, int] = {}
    for r in outcome.rejections:
        kinds[r.reason] = kinds.get(r.reason, 0) + 1
    first = outcome.rejections[0]
    log.info(
        "push from %s: %d accepted, %d rejected (%s); first: %s#%s %s",
        peer_id,
        outcome.accepted,
        len(outcome.rejections),
        ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())),
        first.agent,
        first.seq,
        first.detail or first.reason,
    )
