"""A peer's push: check each envelope, store those that extend their journal, say what was not.

Screening (screening.py) and a move's own checks (moves.py) first, then the store: hash and
signature, seq = head + 1, chain. Equivocation (a different envelope under a seq we hold) is
also journaled as a critical finding, at most MAX_EQUIVOCATION_FINDINGS_PER_HOUR per pushing
peer. docs/mesh.md states the whole trust model.

A move's signature is checked before anything else looks at it (`_forged`): a forged one is
refused as the import would refuse it, and is never judged, reported or counted as a gap, so
no member can get another node named in a finding or stall a journal with one. A takeover is
judged against the mesh (judging.py, the placement layer's judge). An accepted move, even of a
journal homed here, makes this node a replica of it: it disowns the journal in its store (no
local append, whatever a lease renewal says) and tells the placement layer (`on_moved`),
which stops the agent. Moves screened but not yet folded into the journals projection (this
batch, or one staged before it) count for the envelopes after them (pending.py). A fork
between epochs is forks.py's.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import NamedTuple

import msgspec

from eventstore.envelope import decode_event, digest_of
from eventstore.imports import Verified, merge, verify_foreign
from eventstore.store import ForeignEnvelope, ImportResult, ImportStatus
from node.context import NodeContext
from node.sync.acks import AckRecorder
from node.sync.incidents import Incidents
from node.sync.keys import PeerKeys
from node.sync.rules.forks import old_epoch_refused, resolve_forks
from node.sync.rules.judging import TakeoverClaim, TakeoverJudge, Verdict, judged
from node.sync.rules.moves import MovesSeen, plan_moves
from node.sync.rules.outcome import STAGED_PEER, PushOutcome, Rejection, log_rejections
from node.sync.rules.pending import PendingBook, Screening
from node.sync.rules.screening import Screener
from projections.catalogue import MAX_TITLE, Finding, Severity, event_of
from projections.journals import Journals

log = logging.getLogger("agent-node.sync")
# Concurrent import requests per push (signature checks run on that many threads).
VERIFY_LANES = max(1, min(4, os.cpu_count() or 1))
MIN_LANE_SPLIT = 64
# Equivocation findings journaled per pushing peer and hour; more are logged and counted only,
# so a peer that forks journals on purpose cannot fill this node's journal with findings.
MAX_EQUIVOCATION_FINDINGS_PER_HOUR = 10


class Staged(NamedTuple):
    """A batch screened, verified and queued for the writer (`Receiver.stage`)."""

    size: int  # items in the batch
    outcome: PushOutcome
    candidates: list[tuple[int, ForeignEnvelope]]
    checked: list[ImportResult | Verified]
    stored: asyncio.Future[list[ImportResult]]
    start: int = 0  # where the staged part begins (the parts before it are received)
    prior: PushOutcome | None = None  # what the parts before it came to


class Receiver:
    def __init__(
        self, ctx: NodeContext, keys: PeerKeys, incidents: Incidents, acks: AckRecorder
    ) -> None:
        self._ctx = ctx
        self._keys = keys
        self._incidents = incidents
        self._acks = acks
        self._peers = {p.name for p in ctx.config.peers}
        self._equivocations: dict[str, deque[float]] = {}  # peer → times of its findings
        self._book = PendingBook(ctx)
        self._screener = Screener(ctx, self._book, keys.lookup)
        self._seen = MovesSeen()  # moves whose signature held: their equivocations
        self._staged: dict[int, Screening] = {}  # id of a staged batch's future → screening
        # the placement layer: judges takeovers, hears of journals that moved away
        self.judge: TakeoverJudge | None = None
        self.on_moved: Callable[[str, str], None] | None = None

    async def receive(self, peer_id: str, items: Sequence[msgspec.Raw]) -> PushOutcome:
        """The batch a part at a time: a part holds at most one move per journal, so each
        move is judged against the exact state it is applied to (moves.plan_moves)."""
        whole, start = PushOutcome(), 0
        while True:
            size, part = await self._receive_part(peer_id, items[start:])
            _merge(whole, part, start)
            start += size
            if start >= len(items):
                return whole

    async def _receive_part(
        self, peer_id: str, items: Sequence[msgspec.Raw]
    ) -> tuple[int, PushOutcome]:
        """The first part of `items`: how many items it held, and what came of them."""
        size, outcome, candidates, origins, screening = await self._screen_moves(items)
        return size, await self._store_part(peer_id, size, outcome, candidates, origins, screening)

    async def _store_part(
        self,
        peer_id: str,
        size: int,
        outcome: PushOutcome,
        candidates: list[tuple[int, ForeignEnvelope]],
        origins: set[str],
        screening: Screening,
    ) -> PushOutcome:
        await self._keys.ensure(origins)
        await resolve_forks(self._ctx, self._incidents, peer_id, candidates, screening)
        try:
            results = await self._import([item for _, item in candidates])
        except BaseException:
            self._book.forget(screening)
            raise
        return await self._conclude(peer_id, size, outcome, candidates, results, screening)

    async def stage(self, items: Sequence[msgspec.Raw]) -> Staged:
        """The first half of `receive`: screening and signatures, then the envelopes queued
        for the writer. Batches staged one after another commit in that order, so a caller
        may stage the next batch while the one before commits (the NATS consumer does). A
        batch of more than one part has its parts before the last received whole here."""
        prior, start = PushOutcome(), 0
        while True:
            size, outcome, candidates, origins, screening = await self._screen_moves(items[start:])
            if start + size >= len(items):
                break
            part = await self._store_part(
                STAGED_PEER, size, outcome, candidates, origins, screening
            )
            _merge(prior, part, start)
            start += size
        try:
            await self._keys.ensure(origins)
            await resolve_forks(self._ctx, self._incidents, STAGED_PEER, candidates, screening)
            checked = await verify_foreign([item for _, item in candidates], self._keys.lookup)
            stored = self._ctx.store.queue_imports(checked)
        except BaseException:
            self._book.forget(screening)
            raise
        self._staged[id(stored)] = screening
        return Staged(len(items), outcome, candidates, checked, stored, start, prior)

    async def settle(self, peer_id: str, staged: Staged) -> PushOutcome:
        """The second half of `receive`, once the staged batch is committed."""
        screening = self._staged.pop(id(staged.stored), None)
        try:
            results = merge(staged.checked, await staged.stored)
        except BaseException:
            if screening is not None:
                self._book.forget(screening)
            raise
        last = await self._conclude(
            peer_id,
            staged.size - staged.start,
            staged.outcome,
            staged.candidates,
            results,
            screening,
        )
        if not staged.start or staged.prior is None:
            return last
        whole = PushOutcome()
        _merge(whole, staged.prior, 0)
        _merge(whole, last, staged.start)
        return whole

    async def _screen_moves(
        self, items: Sequence[msgspec.Raw]
    ) -> tuple[int, PushOutcome, list[tuple[int, ForeignEnvelope]], set[str], Screening]:
        """`screen` the first part of `items` (all of them, unless a journal moves twice: the
        part ends before its second move); how many items the part holds comes first. A part
        with a takeover is screened again once everything queued before it is committed and
        folded, so its epoch, head and fork are judged on exact state, and its takeovers are
        judged against the mesh (`judge`) before a final screening."""
        book, screen = self._book, self._screener.screen
        outcome = PushOutcome()
        screening = book.screening()
        candidates, origins = screen(items, outcome, screening)
        if not screening.moves_read:
            return len(items), outcome, candidates, origins, screening
        forged = await self._forged(screening.moves_read)
        book.forget(screening)
        plan = plan_moves(screening.moves_read, forged, self._seen)
        if plan.cut is not None:
            items = items[: plan.cut]
        if screening.takeovers:
            await self._ctx.store.barrier()
        outcome = PushOutcome()
        screening = book.screening(forged=forged, refused=plan.refused)
        candidates, origins = screen(items, outcome, screening)
        if screening.claims:
            claims = screening.claims
            verdicts = await judged(self.judge, claims)
            book.forget(screening)
            outcome = PushOutcome()
            screening = book.screening(verdicts=verdicts, forged=forged, refused=plan.refused)
            candidates, origins = screen(items, outcome, screening)
            screening.refuted = [(claims[i], v) for i, v in verdicts.items() if v.refuted]
        screening.critical = plan.incidents
        if screening.forks:
            candidates = old_epoch_refused(candidates, screening, outcome)
        return len(items), outcome, candidates, origins, screening

    async def _forged(self, moves: dict[int, ForeignEnvelope]) -> dict[int, ImportResult]:
        """The moves whose signature does not hold (or whose signer is unknown), by index:
        refused as the import would refuse them, before anything judges or reports them."""
        await self._keys.ensure({decode_event(item.payload).origin for item in moves.values()})
        checked = await verify_foreign(list(moves.values()), self._keys.lookup)
        return {
            index: result
            for index, result in zip(moves, checked, strict=True)
            if isinstance(result, ImportResult)
        }

    async def _conclude(
        self,
        peer_id: str,
        count: int,
        outcome: PushOutcome,
        candidates: list[tuple[int, ForeignEnvelope]],
        results: list[ImportResult],
        screening: Screening | None = None,
    ) -> PushOutcome:
        held: dict[str, int] = {}
        unjudged = self._book.unjudged
        if screening is not None:
            self._book.forget(screening)  # committed and folded: the projection says it now
            for key, title, detail in screening.incidents:
                await self._report_move(peer_id, key, title, detail)
            for key, title, detail in screening.critical:
                await self._report_move(peer_id, key, title, detail, "critical")
            for claim, verdict in screening.refuted:
                await self._refute(claim, verdict)
        for (index, item), result in zip(candidates, results, strict=True):
            if result.status in (ImportStatus.ACCEPTED, ImportStatus.DUPLICATE):
                held[item.stream] = max(held.get(item.stream, 0), item.seq)
            if result.status == ImportStatus.ACCEPTED:
                outcome.accepted += 1
                if screening is not None and index in screening.moves:
                    self._moved(*screening.moves[index])
                elif unjudged.get(item.stream) == item.seq:
                    del unjudged[item.stream]  # that seq is its writer's: no takeover's
                continue
            outcome.rejections.append(
                Rejection(index, item.stream, item.seq, result.status.value, result.detail)
            )
            if result.status == ImportStatus.EQUIVOCATION:
                await self._report_equivocation(peer_id, item)
        outcome.rejections.sort(key=lambda r: r.index)
        if outcome.rejections:
            log_rejections(peer_id, outcome)
            for rejection in outcome.rejections:
                self._ctx.metrics.sync_rejected.labels(reason=rejection.reason).inc()
        outcome.heads = self._heads({item.stream for _, item in candidates}, bool(count))
        self._ctx.metrics.sync_envelopes.inc(count)
        if peer_id in self._peers and held:
            self._acks.note(peer_id, held, at_least=True)
        return outcome

    async def _refute(self, claim: TakeoverClaim, verdict: Verdict) -> None:
        """A takeover of a journal this node is the live home of, refused: this node writes
        the takeover's seq itself (a finding saying so), unless its copy holds that seq
        already. A report only: every node refuses the takeover by the stream's lease log
        alone (node/placement/judge.py), whenever it reads it."""
        store = self._ctx.store
        head = store.head(claim.stream)
        if store.disowned(claim.stream) or (head.seq if head else 0) != claim.seq - 1:
            return
        title = f"refused takeover of journal {claim.stream} by node {claim.origin}"
        finding = Finding(severity="high", title=title[:MAX_TITLE], detail=verdict.detail)
        try:
            await store.append(claim.stream, *event_of(finding))
        except Exception as exc:  # fenced meanwhile (the lease lapsed), or no longer home
            log.info("not refuting the takeover of %s: %s", claim.stream, exc)

    def _moved(self, stream: str, home: str) -> None:
        """An accepted move: this node no longer writes the journal unless it is the home
        (the placement layer owns it again once it holds its lease here)."""
        self._book.unjudged.pop(stream, None)
        if home != self._ctx.name:
            self._ctx.store.disown(stream)
        if self.on_moved is not None:
            try:
                self.on_moved(stream, home)
            except Exception:  # the store refuses its appends all the same
                log.exception("the placement layer failed to hear that %s moved", stream)

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

    async def _report_move(
        self, peer_id: str, key: str, title: str, detail: str, severity: Severity = "high"
    ) -> None:
        """A refused move's finding, within the findings budget of its signer (last in every
        move finding's key): a stream delivers every member's moves as one peer."""
        if self._incidents.seen(key):
            return
        signer = key.rsplit("/", 1)[-1]
        if not self._within_budget(f"{peer_id}/{signer}"):
            log.warning("%s (over the findings budget of %s; not journaled)", title, signer)
            return
        await self._incidents.report(key, severity, title, detail)

    def _within_budget(self, peer_id: str) -> bool:
        """peer_id is an authenticated token name (with a move's signer: a pinned key), so this
        dict is bounded by the config."""
        now = time.monotonic()
        times = self._equivocations.setdefault(peer_id, deque())
        while times and now - times[0] > 3600:
            times.popleft()
        if len(times) >= MAX_EQUIVOCATION_FINDINGS_PER_HOUR:
            return False
        times.append(now)
        return True


def _merge(whole: PushOutcome, part: PushOutcome, start: int) -> None:
    """`part`, whose indices begin at `start` of the batch, into `whole`."""
    whole.accepted += part.accepted
    whole.rejections += [msgspec.structs.replace(r, index=r.index + start) for r in part.rejections]
    whole.heads.update(part.heads)


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
