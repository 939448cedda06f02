"""A peer's push: check each envelope, store those that extend their journal, say what was not.

Checks, in order: readable (seq, agent, base64 payload, `ed25519:` signature, decodable event),
not a node-level `$` journal, its content fits the event catalogue (projections/catalogue.py:
known type, data of the right shape and bounds, a `ts` not too far ahead), not a journal whose
home is this node (sync/ownership.py), written by the journal's home (single writer), origin key
known, then in the store: hash and signature, seq = head + 1, chain. Equivocation (a different
envelope under a seq we hold) is also journaled as a critical finding, at most
MAX_EQUIVOCATION_FINDINGS_PER_HOUR per pushing peer. docs/mesh.md states the whole trust model.

A journal changes writer only by a signed event in it (docs/mesh.md, "Placement and
failover"): a `journal.handoff` from its home, naming a node of its placement set, at the
epoch after the journal's; or a `journal.takeover` from a node of its placement set at the
epoch after the journal's, that the placement layer's judge (`judge`, node/placement/judge.py)
finds sound against the mesh: the home's lease lapsed, nothing the stream acknowledged
overtaken or erased. That holds even for a journal homed here: this node then becomes a
replica, disowns the journal in its store (no local append, whatever a lease renewal says)
and tells the placement layer (`on_moved`), which stops the agent. Other moves are refused
(BAD_HANDOFF, BAD_TAKEOVER; a refused move is journaled as a finding naming its signer). A
move's signature is checked before anything else looks at it (`_forged`): a forged one is
refused as the import would refuse it, and is never judged, reported or counted as a gap, so
no member can get another node named in a finding or stall a journal with one. Moves
screened but not yet folded into the journals projection (this batch, or one staged before it)
count for the envelopes after them (`_Pending`). A takeover at a seq this node already holds
(an old-epoch tail that never reached the new home) whose `prev` is our seq before it wins once
judged: the store rewinds the journal to that seq, the takeover is stored, and a critical
finding carries both envelopes (`_resolve_fork`).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple, Protocol

import msgspec

from eventstore.envelope import SIG_PREFIX, Event, decode_event, digest_of
from eventstore.imports import Verified, merge, verify_foreign
from eventstore.store import ForeignEnvelope, ImportResult, ImportStatus
from node.context import NodeContext
from node.sync.acks import AckRecorder
from node.sync.incidents import Incidents
from node.sync.keys import PeerKeys
from node.sync.ownership import OWN_JOURNAL, Ownership
from node.sync.wire import MalformedEnvelope, agent_of, parse_envelope
from projections.catalogue import (
    AGENT_PLACED,
    JOURNAL_HANDOFF,
    JOURNAL_TAKEOVER,
    MAX_TEXT,
    AgentPlaced,
    CatalogueError,
    JournalHandoff,
    JournalTakeover,
    check_replicated,
    read,
)
from projections.journals import Journals
from projections.keys import is_key_journal, key_journal

NODE_LEVEL = "node_level"
FOREIGN_WRITER = "foreign_writer"
BAD_TAKEOVER = "bad_takeover"
BAD_HANDOFF = "bad_handoff"
log = logging.getLogger("agent-node.sync")
# Concurrent import requests per push (signature checks run on that many threads).
VERIFY_LANES = max(1, min(4, os.cpu_count() or 1))
MIN_LANE_SPLIT = 64
# Equivocation findings journaled per pushing peer and hour; more are logged and counted only,
# so a peer that forks journals on purpose cannot fill this node's journal with findings.
MAX_EQUIVOCATION_FINDINGS_PER_HOUR = 10
# a move screened but not folded this long after is forgotten (a batch commits in well under
# a second; one whose settle never came must not decide who writes a journal for ever)
PENDING_SECS = 60.0
STAGED_PEER = "(stream)"  # who pushed a staged batch, as far as a fork's finding says
UNJUDGED = "takeover_unverified"  # the judge could not look (no NATS link, no answer)
GAP = ImportStatus.GAP.value
MOVES = (JOURNAL_TAKEOVER, JOURNAL_HANDOFF)  # events that change a journal's writer
# a batch's takeovers are judged this many at a time, all within one deadline (the judge's
# own per-claim deadline is JUDGE_TIMEOUT_SECS in node/placement/judge.py)
JUDGE_LANES = 8
BATCH_JUDGE_SECS = 6.0


@dataclass(frozen=True)
class TakeoverClaim:
    """A takeover the envelope's own checks let through, for the judge to look at."""

    stream: str
    seq: int
    origin: str  # its signer: the would-be home
    epoch: int  # the epoch it claims
    previous_home: str
    previous_epoch: int
    held: int  # this node's head of the journal (seq <= held: a fork)
    ts: str


@dataclass(frozen=True)
class Verdict:
    """Why a takeover is refused; `report`: journal a finding naming its signer (else the
    refusal is for now: nothing could be checked)."""

    reason: str
    detail: str
    report: bool = True


class TakeoverJudge(Protocol):
    async def judge(self, claim: TakeoverClaim) -> Verdict | None: ...


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


@dataclass
class _Pending:
    """A journal's home, epoch and placement once the moves screened for it are folded."""

    home: str | None
    epoch: int
    placement: tuple[str, ...] | None
    token: int  # the screening that set it (`_Screening.token`)
    at: float  # time.monotonic() when noted
    from_seq: int = 0  # `home` writes from this seq on; `previous` before it
    previous: str | None = None

    def writer_at(self, seq: int) -> str | None:
        return self.home if seq >= self.from_seq else self.previous


@dataclass
class _Screening:
    """One batch's screening: what it noted, for the batch and for the ones staged after."""

    token: int
    new_homes: dict[str, str] = field(default_factory=dict)  # journals this batch starts
    moves: dict[int, tuple[str, str]] = field(default_factory=dict)  # index → (journal, home)
    forks: list[int] = field(default_factory=list)  # indices of takeovers at a held seq
    takeovers: int = 0  # takeovers seen, accepted or not
    # takeovers that passed the envelope's own checks, for the judge: index → claim
    claims: dict[int, TakeoverClaim] = field(default_factory=dict)
    verdicts: dict[int, Verdict] = field(default_factory=dict)  # the judge's refusals
    # moves (takeovers, handoffs) read, by index: their signatures are checked before any
    # of them is judged or reported, so a forgery names nobody (`_Screening.forged`)
    moves_read: dict[int, ForeignEnvelope] = field(default_factory=dict)
    forged: dict[int, ImportResult] = field(default_factory=dict)
    # journal → the unjudged takeover's seq, when this batch holds its writer's own envelope
    # there (the store imports what follows it only if that one is stored)
    settling: dict[str, int] = field(default_factory=dict)
    incidents: list[tuple[str, str, str]] = field(default_factory=list)  # key, title, detail


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
        self._pending: dict[str, _Pending] = {}  # moves screened, not yet folded
        self._tokens = itertools.count(1)
        self._staged: dict[int, _Screening] = {}  # id of a staged batch's future → screening
        # the placement layer: judges takeovers, hears of journals that moved away
        self.judge: TakeoverJudge | None = None
        # journal → seq of a takeover that could not be judged yet: it and what follows it
        # are gaps (repaired, so judged again, later), not envelopes of the old writer
        self._unjudged: dict[str, int] = {}
        self.on_moved: Callable[[str, str], None] | None = None

    async def receive(self, peer_id: str, items: Sequence[msgspec.Raw]) -> PushOutcome:
        outcome, candidates, origins, screening = await self._screen_moves(items)
        await self._keys.ensure(origins)
        await self._resolve_forks(peer_id, candidates, screening)
        try:
            results = await self._import([item for _, item in candidates])
        except BaseException:
            self._forget(screening)
            raise
        return await self._conclude(peer_id, len(items), outcome, candidates, results, screening)

    async def stage(self, items: Sequence[msgspec.Raw]) -> Staged:
        """The first half of `receive`: screening and signatures, then the envelopes queued
        for the writer. Batches staged one after another commit in that order, so a caller
        may stage the next batch while the one before commits (the NATS consumer does)."""
        outcome, candidates, origins, screening = await self._screen_moves(items)
        try:
            await self._keys.ensure(origins)
            await self._resolve_forks(STAGED_PEER, candidates, screening)
            checked = await verify_foreign([item for _, item in candidates], self._keys.lookup)
            stored = self._ctx.store.queue_imports(checked)
        except BaseException:
            self._forget(screening)
            raise
        self._staged[id(stored)] = screening
        return Staged(len(items), outcome, candidates, checked, stored)

    async def settle(self, peer_id: str, staged: Staged) -> PushOutcome:
        """The second half of `receive`, once the staged batch is committed."""
        screening = self._staged.pop(id(staged.stored), None)
        try:
            results = merge(staged.checked, await staged.stored)
        except BaseException:
            if screening is not None:
                self._forget(screening)
            raise
        return await self._conclude(
            peer_id, staged.size, staged.outcome, staged.candidates, results, screening
        )

    async def _screen_moves(
        self, items: Sequence[msgspec.Raw]
    ) -> tuple[PushOutcome, list[tuple[int, ForeignEnvelope]], set[str], _Screening]:
        """`_screen`; a batch with a takeover is screened again once everything queued before
        it is committed and folded, so its epoch, head and fork are judged on exact state,
        and its takeovers are judged against the mesh (`judge`) before a final screening."""
        outcome = PushOutcome()
        screening = _Screening(next(self._tokens))
        candidates, origins = self._screen(items, outcome, screening)
        if not screening.moves_read:
            return outcome, candidates, origins, screening
        forged = await self._forged(screening.moves_read)
        if not screening.takeovers and not forged:
            return outcome, candidates, origins, screening
        self._forget(screening)
        if screening.takeovers:
            await self._ctx.store.barrier()
        outcome, screening = PushOutcome(), _Screening(next(self._tokens), forged=forged)
        candidates, origins = self._screen(items, outcome, screening)
        if screening.claims:
            verdicts = await self._judged(screening.claims)
            self._forget(screening)
            outcome = PushOutcome()
            screening = _Screening(next(self._tokens), verdicts=verdicts, forged=forged)
            candidates, origins = self._screen(items, outcome, screening)
        if screening.forks:
            candidates = self._old_epoch_refused(candidates, screening, outcome)
        return outcome, candidates, origins, screening

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

    async def _judged(self, claims: dict[int, TakeoverClaim]) -> dict[int, Verdict]:
        """The judge's refusals of a batch's takeovers, judged JUDGE_LANES at a time within
        one deadline (BATCH_JUDGE_SECS): what it has not answered by then is unjudged."""
        judge = self.judge
        if judge is None:
            idle = Verdict(UNJUDGED, "placement is not running", report=False)
            return dict.fromkeys(claims, idle)
        lanes = asyncio.Semaphore(JUDGE_LANES)

        async def judged(claim: TakeoverClaim) -> Verdict | None:
            async with lanes:
                return await judge.judge(claim)

        tasks = {index: asyncio.ensure_future(judged(claim)) for index, claim in claims.items()}
        try:
            await asyncio.wait(tasks.values(), timeout=BATCH_JUDGE_SECS)
        finally:
            for task in tasks.values():
                task.cancel()
        late = Verdict(UNJUDGED, "the mesh did not answer in time", report=False)
        verdicts = {}
        for index, task in tasks.items():
            if not task.done() or task.cancelled():
                verdicts[index] = late
            elif task.exception() is not None:
                log.error("judging %s failed", claims[index], exc_info=task.exception())
                verdicts[index] = Verdict(UNJUDGED, "the judge failed", report=False)
            elif (verdict := task.result()) is not None:
                verdicts[index] = verdict
        return verdicts

    def _old_epoch_refused(
        self,
        candidates: list[tuple[int, ForeignEnvelope]],
        screening: _Screening,
        outcome: PushOutcome,
    ) -> list[tuple[int, ForeignEnvelope]]:
        """A fork's old-epoch envelopes in the same batch (at or after the takeover's seq,
        not by the new home), refused: they must not be stored again after the rewind."""
        forks = {
            item.stream: (item.seq, home)
            for index, item in candidates
            if index in screening.forks
            for _, home in [screening.moves[index]]
        }
        kept: list[tuple[int, ForeignEnvelope]] = []
        for index, item in candidates:
            fork = forks.get(item.stream)
            if fork is not None and item.seq >= fork[0]:
                origin = decode_event(item.payload).origin
                if origin != fork[1]:
                    detail = f"old epoch: the journal's writer from seq {fork[0]} is {fork[1]!r}"
                    outcome.rejections.append(
                        Rejection(index, item.stream, item.seq, FOREIGN_WRITER, detail)
                    )
                    continue
            kept.append((index, item))
        return kept

    async def _conclude(
        self,
        peer_id: str,
        count: int,
        outcome: PushOutcome,
        candidates: list[tuple[int, ForeignEnvelope]],
        results: list[ImportResult],
        screening: _Screening | None = None,
    ) -> PushOutcome:
        held: dict[str, int] = {}
        if screening is not None:
            self._forget(screening)  # committed and folded: the projection says it now
            for key, title, detail in screening.incidents:
                await self._report_move(peer_id, key, title, detail)
        for (index, item), result in zip(candidates, results, strict=True):
            if result.status in (ImportStatus.ACCEPTED, ImportStatus.DUPLICATE):
                held[item.stream] = max(held.get(item.stream, 0), item.seq)
            if result.status == ImportStatus.ACCEPTED:
                outcome.accepted += 1
                if screening is not None and index in screening.moves:
                    self._moved(*screening.moves[index])
                elif self._unjudged.get(item.stream) == item.seq:
                    del self._unjudged[item.stream]  # that seq is its writer's: no takeover's
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
        self, items: Sequence[msgspec.Raw], outcome: PushOutcome, screening: _Screening
    ) -> tuple[list[tuple[int, ForeignEnvelope]], set[str]]:
        """Everything that needs neither key nor head; the rest goes to the store."""
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
            if event.type in MOVES:
                forged = screening.forged.get(index)
                if forged is not None:
                    reason = forged.status.value
                    rejection = Rejection(index, item.stream, item.seq, reason, forged.detail)
                    outcome.rejections.append(rejection)
                    continue
                screening.moves_read[index] = item
            refusal = self._refusal(index, item, event, now, screening)
            if refusal is not None:
                reason, detail = refusal
                outcome.rejections.append(Rejection(index, item.stream, item.seq, reason, detail))
                continue
            if self._unjudged.get(item.stream) == item.seq and index not in screening.moves:
                screening.settling[item.stream] = item.seq
            writer = self._writer_of(item, event, index, screening)
            if writer is not None:
                item = item._replace(writer=writer)
            origins.add(event.origin)
            candidates.append((index, item))
        return candidates, origins

    def _refusal(
        self, index: int, item: ForeignEnvelope, event: Event, now: datetime, batch: _Screening
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
        stream, journals = item.stream, self._ctx.projections.get(Journals)
        unjudged = self._unjudged.get(stream)
        if unjudged is not None and item.seq > unjudged and batch.settling.get(stream) != unjudged:
            return GAP, f"after the takeover at seq {unjudged}, not judged yet"
        pending = self._pending_of(stream)
        if pending is not None:
            home, epoch = pending.home, pending.epoch
        else:
            home = journals.home_of(stream) or batch.new_homes.get(stream)
            epoch = journals.epoch_of(stream)
        held = journals.head.get(stream, 0)
        kind = event.type
        if kind == JOURNAL_TAKEOVER:
            batch.takeovers += 1
            takeover = read(JournalTakeover, event.data)
            if takeover is not None and takeover.epoch > epoch and stream != self._ctx.name:
                if takeover.epoch != epoch + 1:  # epochs never run ahead (no exhaustion)
                    return self._bad_takeover(
                        item, event, batch, f"its epoch {takeover.epoch} is not {epoch + 1}"
                    )
                return self._takeover(index, item, event, takeover, home, epoch, batch)
            if item.seq > held and not (
                takeover is not None and event.origin == home and takeover.epoch == epoch
            ):
                return self._bad_takeover(
                    item, event, batch, f"its epoch does not raise the journal's epoch {epoch}"
                )
        refused = self._ownership.refuse(stream, pending.home if pending else None)
        if refused is not None:
            return OWN_JOURNAL, refused
        if home is None and item.seq == 1:
            refused = self._ownership.refuse_home(stream, event.origin)
            if refused is not None:
                return FOREIGN_WRITER, refused
            batch.new_homes[stream] = event.origin
        elif home is not None:
            writer = home if pending is None else pending.writer_at(item.seq)
            if item.seq <= held and epoch > 0 and pending is None:  # who wrote it in its epoch
                writer = journals.writer_at(stream, item.seq) or event.origin
            if event.origin != writer:
                return (
                    FOREIGN_WRITER,
                    f"journal is written by {writer!r}, envelope by {event.origin!r}",
                )
        if item.seq > held and kind in (JOURNAL_HANDOFF, AGENT_PLACED):
            return self._placement(index, item, event, home or event.origin, epoch, batch)
        return None

    def _writer_of(
        self, item: ForeignEnvelope, event: Event, index: int, b: _Screening
    ) -> str | None:
        """Who the store must find signed a screened envelope of a journal that moved (a move
        itself: its signer, checked here; the store's own rule, the head's signer, would
        refuse a new home's envelopes). None: a journal that never moved."""
        if index in b.moves:
            return event.origin
        pending = self._pending_of(item.stream)
        if pending is not None:
            return pending.writer_at(item.seq)
        journals = self._ctx.projections.get(Journals)
        return journals.home_of(item.stream) if journals.epoch_of(item.stream) > 0 else None

    def _takeover(
        self,
        index: int,
        item: ForeignEnvelope,
        event: Event,
        takeover: JournalTakeover,
        home: str | None,
        epoch: int,
        batch: _Screening,
    ) -> tuple[str, str] | None:
        """A takeover at the next epoch: from a node of the placement set other than its
        home, at the seq after our head, or at a held seq whose `prev` is ours (a fork,
        resolved later); then judged against the mesh (`judge`)."""
        stream = item.stream
        placement = self._placement_of(stream)
        if home is None or placement is None:
            return self._bad_takeover(item, event, batch, "the journal was never placed")
        if event.origin not in placement:
            return self._bad_takeover(
                item, event, batch, f"{event.origin!r} is not in its placement set"
            )
        if event.origin == home:
            return self._bad_takeover(item, event, batch, f"{home!r} is its home already")
        head = self._ctx.store.head(stream)
        held = head.seq if head is not None else 0
        if item.seq <= held:
            before = self._ctx.store.get(stream, item.seq - 1) if item.seq > 1 else None
            ours = before.payload_hash if before is not None else ""
            if event.prev != ours:
                return self._bad_takeover(
                    item, event, batch, f"it does not follow this node's seq {item.seq - 1}"
                )
        verdict = batch.verdicts.get(index)
        if verdict is not None:
            if verdict.report:
                self._unjudged.pop(stream, None)
                return self._bad_takeover(item, event, batch, verdict.detail)
            self._unjudged[stream] = item.seq
            return GAP, f"takeover of {stream} at seq {item.seq} not judged yet: {verdict.detail}"
        batch.claims[index] = TakeoverClaim(
            stream, item.seq, event.origin, takeover.epoch, home, epoch, held, event.ts
        )
        if item.seq <= held:
            batch.forks.append(index)
        self._note(stream, event.origin, takeover.epoch, placement, batch, item.seq, home)
        batch.moves[index] = (stream, event.origin)
        return None

    def _placement(
        self, index: int, item: ForeignEnvelope, event: Event, home: str, epoch: int, b: _Screening
    ) -> tuple[str, str] | None:
        """A new placement set, or a handoff (from the home: to a node of the placement set,
        with a higher epoch), noted for the envelopes after it."""
        stream = item.stream
        if event.type == AGENT_PLACED:
            placed = read(AgentPlaced, event.data)
            if placed is not None:
                before = self._pending_of(stream)
                since, previous = (before.from_seq, before.previous) if before else (0, home)
                self._note(stream, home, epoch, tuple(placed.placement), b, since, previous)
            return None
        handoff = read(JournalHandoff, event.data)
        placement = self._placement_of(stream)
        why = None
        if handoff is None:
            why = "it is unreadable"
        elif handoff.epoch != epoch + 1:
            why = f"its epoch {handoff.epoch} is not {epoch + 1}"
        elif placement is None or handoff.to not in placement:
            why = f"{handoff.to!r} is not in the journal's placement set"
        if handoff is None or why is not None:
            detail = f"handoff of {stream} at seq {item.seq} by {event.origin!r}: {why}"
            title = f"refused handoff of journal {stream} by node {event.origin}"
            b.incidents.append((f"bad-handoff/{stream}/{event.origin}", title, detail))
            return BAD_HANDOFF, detail
        self._note(stream, handoff.to, handoff.epoch, placement, b, item.seq + 1, home)
        b.moves[index] = (stream, handoff.to)
        return None

    def _bad_takeover(
        self, item: ForeignEnvelope, event: Event, batch: _Screening, why: str
    ) -> tuple[str, str]:
        detail = f"takeover of {item.stream} at seq {item.seq} by {event.origin!r}: {why}"
        batch.incidents.append(
            (
                f"bad-takeover/{item.stream}/{event.origin}",
                f"refused takeover of journal {item.stream} by node {event.origin}",
                detail,
            )
        )
        return BAD_TAKEOVER, detail

    def _placement_of(self, stream: str) -> tuple[str, ...] | None:
        pending = self._pending_of(stream)
        if pending is not None and pending.placement is not None:
            return pending.placement
        return self._ctx.projections.get(Journals).placement_of(stream)

    def _note(
        self,
        stream: str,
        home: str | None,
        epoch: int,
        placement: tuple[str, ...] | None,
        batch: _Screening,
        from_seq: int,
        previous: str | None,
    ) -> None:
        """What the journals projection will say of `stream` once this batch is folded."""
        self._pending[stream] = _Pending(
            home, epoch, placement, batch.token, time.monotonic(), from_seq, previous
        )

    def _pending_of(self, stream: str) -> _Pending | None:
        """What a screening noted for `stream`, unless its batch should long be folded (a
        staged batch that was never settled: its caller went away)."""
        pending = self._pending.get(stream)
        if pending is not None and time.monotonic() - pending.at > PENDING_SECS:
            del self._pending[stream]
            return None
        return pending

    def _forget(self, screening: _Screening) -> None:
        """Drop what this screening noted (its batch is folded, or failed)."""
        for stream in [s for s, p in self._pending.items() if p.token == screening.token]:
            del self._pending[stream]

    def _moved(self, stream: str, home: str) -> None:
        """An accepted move: this node no longer writes the journal unless it is the home
        (the placement layer owns it again once it holds its lease here)."""
        self._unjudged.pop(stream, None)
        if home != self._ctx.name:
            self._ctx.store.disown(stream)
        if self.on_moved is not None:
            try:
                self.on_moved(stream, home)
            except Exception:  # the store refuses its appends all the same
                log.exception("the placement layer failed to hear that %s moved", stream)

    async def _resolve_forks(
        self, peer_id: str, candidates: list[tuple[int, ForeignEnvelope]], screening: _Screening
    ) -> None:
        """Each takeover at a held seq (its signature holds: `_forged`): journal the fork,
        rewind the journal to the seq before it (the takeover is then imported as the next)."""
        for index in screening.forks:
            item = next(item for i, item in candidates if i == index)
            await self._resolve_fork(peer_id, item)

    async def _resolve_fork(self, peer_id: str, item: ForeignEnvelope) -> None:
        store = self._ctx.store
        head = store.head(item.stream)
        replaced = store.get(item.stream, item.seq)
        if head is None or replaced is None:
            return
        theirs = "sha256:" + digest_of(item.payload).hex()
        removed_range = f"{item.seq}..{head.seq}"
        takeover = {
            "seq": item.seq,
            "agent": item.stream,
            "payload": base64.b64encode(item.payload).decode(),
            "signature": SIG_PREFIX + base64.b64encode(item.signature).decode(),
        }
        detail = msgspec.json.encode(
            {
                "journal": item.stream,
                "removed_seqs": removed_range,
                "pushed_by": peer_id,
                "takeover": takeover,
                "removed_first": replaced.as_pushed(),
            }
        ).decode()
        if len(detail) > MAX_TEXT:  # too large to quote whole: their hashes say which they are
            detail = (
                f"journal {item.stream}: removed seqs {removed_range}; takeover {theirs}, "
                f"removed seq {item.seq} {replaced.payload_hash} (both too large to quote)"
            )
        await self._incidents.report(
            f"fork/{item.stream}/{item.seq}/{theirs}",
            "critical",
            f"equivocation in journal {item.stream} at seq {item.seq}: fork between epochs "
            "resolved to the takeover",
            detail,
        )
        store.disown(item.stream)  # the new home writes it: nothing of ours may land after this
        removed = await store.rewind(item.stream, item.seq - 1)
        log.warning(
            "journal %s rewound to seq %d for a takeover by a higher epoch: %d envelope(s) "
            "of the old epoch removed (%s)",
            item.stream,
            item.seq - 1,
            len(removed),
            removed_range,
        )

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

    async def _report_move(self, peer_id: str, key: str, title: str, detail: str) -> None:
        if self._incidents.seen(key):
            return
        if not self._within_budget(peer_id):
            log.warning("%s (over the findings budget of %s; not journaled)", detail, peer_id)
            return
        await self._incidents.report(key, "high", title, detail)

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
