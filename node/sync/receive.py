"""A peer's push: check each envelope, store those that extend their journal, say what was not.

Checks, in order: readable (seq, agent, base64 payload, `ed25519:` signature, decodable event),
not a node-level `$` journal, its content fits the event catalogue (projections/catalogue.py:
known type, data of the right shape and bounds, a `ts` not too far ahead), not a journal whose
home is this node (sync/ownership.py), written by the journal's home (single writer), origin key
known, then in the store: hash and signature, seq = head + 1, chain. Equivocation (a different
envelope under a seq we hold) is also journaled as a critical finding, at most
MAX_EQUIVOCATION_FINDINGS_PER_HOUR per pushing peer. docs/mesh.md states the whole trust model.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

import msgspec

from eventstore.envelope import Event, decode_event, digest_of
from eventstore.imports import Verified, merge, verify_foreign
from eventstore.store import ForeignEnvelope, ImportResult, ImportStatus
from node.context import NodeContext
from node.sync.acks import AckRecorder
from node.sync.incidents import Incidents
from node.sync.keys import PeerKeys
from node.sync.ownership import OWN_JOURNAL, Ownership
from node.sync.wire import MalformedEnvelope, agent_of, parse_envelope
from projections.catalogue import CatalogueError, check_replicated
from projections.journals import Journals
from projections.keys import is_key_journal, key_journal

NODE_LEVEL = "node_level"
FOREIGN_WRITER = "foreign_writer"
log = logging.getLogger("agent-node.sync")
# Concurrent import requests per push (signature checks run on that many threads).
VERIFY_LANES = max(1, min(4, os.cpu_count() or 1))
MIN_LANE_SPLIT = 64
# Equivocation findings journaled per pushing peer and hour; more are logged and counted only,
# so a peer that forks journals on purpose cannot fill this node's journal with findings.
MAX_EQUIVOCATION_FINDINGS_PER_HOUR = 10


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

    def as_reply(self) -> dict[str, Any]:
        return {
            "accepted": self.accepted,
            "rejected": len(self.rejections),
            "heads": self.heads,
            "rejections": msgspec.to_builtins(self.rejections),
        }


class Staged(NamedTuple):
    """A batch screened, verified and queued for the writer (`Receiver.stage`)."""

    size: int  # items in the batch
    outcome: PushOutcome
    candidates: list[tuple[int, ForeignEnvelope]]
    checked: list[ImportResult | Verified]
    stored: asyncio.Future[list[ImportResult]]


class Receiver:
    def __init__(
        self, ctx: NodeContext, keys: PeerKeys, incidents: Incidents, acks: AckRecorder
    ) -> None:
        self._ctx = ctx
        self._keys = keys
        self._incidents = incidents
        self._acks = acks
        self._peers = {p.name for p in ctx.config.peers}
        self._ownership = Ownership(ctx)
        self._equivocations: dict[str, deque[float]] = {}  # peer → times of its findings

    async def receive(self, peer_id: str, items: Sequence[msgspec.Raw]) -> PushOutcome:
        outcome = PushOutcome()
        candidates, origins = self._screen(items, outcome)
        await self._keys.ensure(origins)
        results = await self._import([item for _, item in candidates])
        return await self._conclude(peer_id, len(items), outcome, candidates, results)

    async def stage(self, items: Sequence[msgspec.Raw]) -> Staged:
        """The first half of `receive`: screening and signatures, then the envelopes queued
        for the writer. Batches staged one after another commit in that order, so a caller
        may stage the next batch while the one before commits (the NATS consumer does)."""
        outcome = PushOutcome()
        candidates, origins = self._screen(items, outcome)
        await self._keys.ensure(origins)
        checked = await verify_foreign([item for _, item in candidates], self._keys.lookup)
        stored = self._ctx.store.queue_imports(checked)
        return Staged(len(items), outcome, candidates, checked, stored)

    async def settle(self, peer_id: str, staged: Staged) -> PushOutcome:
        """The second half of `receive`, once the staged batch is committed."""
        results = merge(staged.checked, await staged.stored)
        return await self._conclude(
            peer_id, staged.size, staged.outcome, staged.candidates, results
        )

    async def _conclude(
        self,
        peer_id: str,
        count: int,
        outcome: PushOutcome,
        candidates: list[tuple[int, ForeignEnvelope]],
        results: list[ImportResult],
    ) -> PushOutcome:
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
            for rejection in outcome.rejections:
                self._ctx.metrics.sync_rejected.labels(reason=rejection.reason).inc()
        outcome.heads = self._heads({item.stream for _, item in candidates}, bool(count))
        self._ctx.metrics.sync_envelopes.inc(count)
        if peer_id in self._peers and held:
            self._acks.note(peer_id, held, at_least=True)
        return outcome

    def _screen(
        self, items: Sequence[msgspec.Raw], outcome: PushOutcome
    ) -> tuple[list[tuple[int, ForeignEnvelope]], set[str]]:
        """Everything that needs neither key nor head; the rest goes to the store."""
        batch_home: dict[str, str] = {}
        candidates: list[tuple[int, ForeignEnvelope]] = []
        origins: set[str] = set()
        now = datetime.now(UTC)
        for index, raw in enumerate(items):
            try:
                item = parse_envelope(raw)
                event = decode_event(item.payload)
            except (
                MalformedEnvelope,
                msgspec.DecodeError,
                msgspec.ValidationError,
                RecursionError,  # a payload nested past msgspec's depth limit
            ) as exc:
                agent, seq = agent_of(raw)
                reason = ImportStatus.MALFORMED.value
                outcome.rejections.append(Rejection(index, agent, seq, reason, str(exc)[:300]))
                continue
            refusal = self._refusal(item, event, now, batch_home)
            if refusal is not None:
                reason, detail = refusal
                outcome.rejections.append(Rejection(index, item.stream, item.seq, reason, detail))
                continue
            origins.add(event.origin)
            candidates.append((index, item))
        return candidates, origins

    def _refusal(
        self, item: ForeignEnvelope, event: Event, now: datetime, batch_home: dict[str, str]
    ) -> tuple[str, str] | None:
        """(reason, detail) when the envelope's content or its journal rules it out."""
        if item.stream.startswith("$"):
            return NODE_LEVEL, "node-level journals are not replicated"
        if is_key_journal(item.stream) and item.stream != key_journal(event.origin):
            return (
                FOREIGN_WRITER,
                f"{item.stream} is written by its node only, not {event.origin!r}",
            )
        try:
            check_replicated(event, now)
        except CatalogueError as exc:
            return exc.reason, exc.detail
        refused = self._ownership.refuse(item.stream)
        if refused is not None:
            return OWN_JOURNAL, refused
        home = self._ownership.home_of(item.stream) or batch_home.get(item.stream)
        if home is None and item.seq == 1:
            refused = self._ownership.refuse_home(item.stream, event.origin)
            if refused is not None:
                return FOREIGN_WRITER, refused
            batch_home[item.stream] = event.origin
        elif home is not None and event.origin != home:
            return FOREIGN_WRITER, f"journal is written by {home!r}, envelope by {event.origin!r}"
        return None

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
        heads = self._ctx.projections.get(Journals).head
        if not any_items:
            return {s: seq for s, seq in heads.items() if not s.startswith("$")}
        return {s: heads.get(s, 0) for s in sorted(streams)}

    async def _report_equivocation(self, peer_id: str, item: ForeignEnvelope) -> None:
        stored = self._ctx.store.get(item.stream, item.seq)
        theirs = "sha256:" + digest_of(item.payload).hex()
        ours = stored.payload_hash if stored else "(none)"
        origin = stored.event.origin if stored else "?"
        key = f"equivocation/{item.stream}/{item.seq}/{theirs}"
        if self._incidents.seen(key):
            return
        if not self._within_budget(peer_id):
            log.warning(
                "equivocation in %s#%s pushed by %s: over %d findings/h for this peer; "
                "not journaled",
                item.stream,
                item.seq,
                peer_id,
                MAX_EQUIVOCATION_FINDINGS_PER_HOUR,
            )
            return
        await self._incidents.report(
            key,
            "critical",
            f"equivocation in journal {item.stream} at seq {item.seq}",
            f"peer {peer_id} pushed {theirs}, this node holds {ours} signed by {origin}; "
            "the pushed envelope was rejected",
        )

    def _within_budget(self, peer_id: str) -> bool:
        """peer_id is an authenticated token name, so this dict is bounded by the config."""
        now = time.monotonic()
        times = self._equivocations.setdefault(peer_id, deque())
        while times and now - times[0] > 3600:
            times.popleft()
        if len(times) >= MAX_EQUIVOCATION_FINDINGS_PER_HOUR:
            return False
        times.append(now)
        return True


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
        "push from %s: %d accepted, %d rejected (%s); first: %r#%s %r",
        peer_id,
        outcome.accepted,
        len(outcome.rejections),
        ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())),
        first.agent,
        first.seq,
        first.detail or first.reason,
    )
