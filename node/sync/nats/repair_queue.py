"""Repairs in the background: the consumer and the heads check ask, nobody waits.

A journal to repair is a job (journal, the seq wanted). Every configured peer has a queue of
its own and one worker, so at most one request is outstanding per peer and a peer that never
answers holds back only the journals queued for it, each request for at most
`[mesh] repair_timeout_secs`. A job goes first to the journal's home, then to the peers whose
(checked) heads claims hold it furthest (nats/claims.py); a demoted peer is asked last. A peer
that fails rests (backoff, `[sync] backoff_initial_secs` doubling to `backoff_max_secs`) and
its queued jobs move on to the next candidate meanwhile. A job every candidate was asked for
waits (the same backoff, per job) and starts over. Jobs for which the stream gave evidence (a
`gap`: a signed envelope after the hole) are served before jobs only a heads claim asks for.

Nothing the consumer acknowledged without applying is lost: a gapped job remembers the first
such message (its subject and stream seq, a `Hold`), and when the peers could not bring the
journal that far but it now reaches the envelope before the hold, the messages are read again
from the stream (`STREAM.MSG.GET` with `next_by_subj`) and received in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import deque

import aiohttp
import msgspec
from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from node.context import NodeContext
from node.sync.nats.claims import ClaimBook
from node.sync.nats.envelopes import envelopes_of
from node.sync.nats.gaps import GAP, HOLDS_FILE, STREAM_PEER, Hold, HoldFile, SavedHold
from node.sync.nats.metrics import NatsMetrics
from node.sync.nats.repair import UNREACHABLE, HttpRepair
from node.sync.nats.subjects import stream_name
from node.sync.rules.receiver import Receiver
from projections.journals import Journals

log = logging.getLogger("agent-node.sync")
MAX_JOBS = 10_000
MAX_GAP_JOBS_PER_PUBLISHER = 1000
REREAD_MAX_MESSAGES = 1000
REREAD_CHUNK = 100
PULL_ERRORS = (aiohttp.ClientError, TimeoutError, OSError, ValueError)


class _Job:
    __slots__ = (
        "backoff",
        "evidence",
        "hold",
        "journal",
        "publisher",
        "queued",
        "reread_at",
        "retry_at",
        "tried",
        "want",
    )

    def __init__(self, journal: str, want: int, evidence: bool, publisher: str | None) -> None:
        self.journal = journal
        self.want = want
        self.evidence = evidence  # a signed envelope past the hole was seen on the stream
        self.publisher = publisher  # whose stream message showed the gap (bounds its jobs)
        self.hold: Hold | None = None
        self.tried: set[str] = set()  # peers asked since the job (re)started
        self.queued: str | None = None  # the peer that holds it (queued or asking); None: waiting
        self.retry_at = 0.0
        self.backoff = 0.0
        self.reread_at = -1  # the journal's head at the last re-read of the stream


class _PeerQueue:
    """One peer's jobs: those of journals it is the home of or claims first, those it is
    only asked for as a fallback after; one worker takes them in turn."""

    def __init__(self) -> None:
        self.first: deque[_Job] = deque()
        self.fallback: deque[_Job] = deque()
        self.ready = asyncio.Event()
        self.rest_until = 0.0
        self.backoff = 0.0

    def put(self, job: _Job, first_choice: bool) -> None:
        (self.first if first_choice else self.fallback).append(job)
        self.ready.set()

    async def get(self) -> _Job:
        while not self.first and not self.fallback:
            self.ready.clear()
            await self.ready.wait()
        return self.first.popleft() if self.first else self.fallback.popleft()


class RepairQueue:
    def __init__(
        self,
        ctx: NodeContext,
        receiver: Receiver,
        puller: HttpRepair,
        claims: ClaimBook,
        metrics: NatsMetrics,
    ) -> None:
        self._ctx = ctx
        self._receiver = receiver
        self._puller = puller
        self._claims = claims
        self._metrics = metrics
        self._peers = {p.name: p for p in ctx.config.peers}
        self._queues = {name: _PeerQueue() for name in self._peers}
        self._jobs: dict[str, _Job] = {}
        self._gap_jobs: dict[str, int] = {}  # publisher → its gap jobs
        self._waiting_changed = asyncio.Event()
        self._stream = stream_name(ctx.config.mesh.name)
        self._holds = HoldFile(ctx.config.data_path / HOLDS_FILE)
        self._holds_changed = False
        for saved in self._holds.load():  # what was acknowledged unapplied before a restart
            hold = Hold(saved.subject, saved.stream_seq, saved.seq)
            self.request(saved.journal, saved.want, hold=hold, publisher=saved.publisher)
        self.js: JetStreamContext | None = None  # while connected: for re-reading the stream

    def head(self, journal: str) -> int:
        return self._ctx.projections.get(Journals).head.get(journal, 0)

    def request(
        self,
        journal: str,
        want: int,
        *,
        hold: Hold | None = None,
        publisher: str | None = None,
    ) -> None:
        """Repair `journal` up to `want`, soon; never waits. `hold`: the consumer acknowledged
        that message unapplied (a `gap`), `publisher` published it."""
        if want <= self.head(journal):
            return
        job = self._jobs.get(journal)
        evidence = hold is not None
        if job is None:
            if len(self._jobs) >= MAX_JOBS:
                return
            if publisher is not None:
                if self._gap_jobs.get(publisher, 0) >= MAX_GAP_JOBS_PER_PUBLISHER:
                    return
                self._gap_jobs[publisher] = self._gap_jobs.get(publisher, 0) + 1
            job = self._jobs[journal] = _Job(journal, want, evidence, publisher)
            self._metrics.repair_jobs.set(len(self._jobs))
            job.hold = hold
            self._holds_changed |= hold is not None
            self._assign(job)
            return
        job.want = max(job.want, want)
        if hold is not None and (job.hold is None or hold.stream_seq < job.hold.stream_seq):
            job.hold = hold
            self._holds_changed = True
        if evidence and not job.evidence:
            job.evidence = True
        if job.queued is None and not job.tried:
            self._waiting_changed.set()

    async def save_holds(self) -> None:
        """Write the holds when they changed: the consumer calls this before acknowledging a
        batch it handed gaps over from, so a restart still knows of them."""
        if not self._holds_changed:
            return
        self._holds_changed = False
        await self._holds.save(
            [
                SavedHold(
                    j.journal, j.want, j.hold.subject, j.hold.stream_seq, j.hold.seq, j.publisher
                )
                for j in self._jobs.values()
                if j.hold is not None
            ]
        )

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            for name in self._peers:
                group.create_task(self._work(name), name=f"nats-repair-{name}")
            group.create_task(self._retry(), name="nats-repair-retry")

    def _candidates(self, job: _Job) -> list[str]:
        """Peers to ask for the job, best first: the home, then the furthest claims."""
        head = self.head(job.journal)
        home = self._ctx.projections.get(Journals).home_of(job.journal)
        names = []
        for name in self._peers:
            if name in job.tried:
                continue
            claim = self._claims.claim(name, job.journal)
            if job.evidence or name == home or claim > head:
                names.append(name)

        def rank(name: str) -> tuple[bool, bool, int, str]:
            return (
                self._claims.demoted(name),
                name != home,
                -self._claims.claim(name, job.journal),
                name,
            )

        return sorted(names, key=rank)

    def _first_choice(self, name: str, job: _Job) -> bool:
        """Whether `name` is asked for the job as its home or for its claim (not a fallback)."""
        journals = self._ctx.projections.get(Journals)
        if journals.home_of(job.journal) == name:
            return True
        return self._claims.claim(name, job.journal) > self.head(job.journal)

    def _assign(self, job: _Job) -> None:
        """Queue the job at its best candidate that is not resting; or let it wait."""
        now = time.monotonic()
        job.queued = None
        candidates = self._candidates(job)
        for name in candidates:
            if self._queues[name].rest_until <= now:
                job.queued = name
                self._queues[name].put(job, self._first_choice(name, job))
                return
        if not candidates and not job.tried and not job.evidence:
            self._finish(job)  # only claims asked for it, and none stands any more
            return
        if candidates:  # every one rests: try again when the first is back
            job.retry_at = min(self._queues[n].rest_until for n in candidates)
        else:  # every candidate was asked: start over after a while
            sync = self._ctx.config.sync
            job.backoff = min(sync.backoff_max_secs, job.backoff * 2 or sync.backoff_initial_secs)
            job.retry_at = now + job.backoff * random.uniform(0.8, 1.2)
            job.tried.clear()
        self._waiting_changed.set()

    def _finish(self, job: _Job) -> None:
        if self._jobs.get(job.journal) is job:
            del self._jobs[job.journal]
            self._holds_changed |= job.hold is not None
            self._metrics.repair_jobs.set(len(self._jobs))
            if job.publisher is not None:
                left = self._gap_jobs.get(job.publisher, 1) - 1
                if left:
                    self._gap_jobs[job.publisher] = left
                else:
                    self._gap_jobs.pop(job.publisher, None)

    async def _retry(self) -> None:
        """Requeue waiting jobs whose time came (a rested peer, a job's backoff)."""
        while True:
            now = time.monotonic()
            waiting = [j for j in self._jobs.values() if j.queued is None]
            for job in waiting:
                if self.head(job.journal) >= job.want:
                    self._finish(job)
                elif job.retry_at <= now:
                    if not job.tried:  # a new round: what the stream holds may apply now
                        await self._reread(job)
                        if self.head(job.journal) >= job.want:
                            self._finish(job)
                            continue
                    self._assign(job)
            self._waiting_changed.clear()
            try:  # what finished (lazily: after a restart such a job finishes at once)
                await self.save_holds()
            except OSError as exc:
                self._holds_changed = True
                log.warning("saving the repair holds: %s", exc)
            due = [j.retry_at for j in self._jobs.values() if j.queued is None]
            delay = max(0.05, min(due) - time.monotonic()) if due else 60.0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._waiting_changed.wait(), min(delay, 5.0))

    async def _work(self, name: str) -> None:
        queue = self._queues[name]
        while True:
            job = await queue.get()
            try:
                await self._turn(name, queue, job)
            except Exception:  # a bug must not end repairs (nor the NATS link with them)
                log.exception("repair of %s from %s", job.journal, name)
                self._finish(job)
                await asyncio.sleep(1.0)

    async def _turn(self, name: str, queue: _PeerQueue, job: _Job) -> None:
        """Ask peer `name` for `job`'s journal once; then finish, requeue or pass it on."""
        peer, sync = self._peers[name], self._ctx.config.sync
        # (job.queued stays `name` while it is asked: the retry loop leaves it alone)
        if self._jobs.get(job.journal) is not job:
            return
        before = self.head(job.journal)
        if before >= job.want:
            self._finish(job)
            return
        if queue.rest_until > time.monotonic() or name not in self._candidates(job):
            self._assign(job)  # on to the next candidate while this peer rests (or demoted)
            return
        claimed = self._claims.claim(name, job.journal)
        why, unreachable = "", False
        try:
            got = await self._puller.pull(peer, job.journal, job.want)
        except PULL_ERRORS as exc:
            got, why = 0, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            # a node that is down has a stale heads record, not a lying one: it only rests
            unreachable = isinstance(exc, UNREACHABLE)
            log.info("repair of %s from %s: %s", job.journal, name, why)
            queue.backoff = min(
                sync.backoff_max_secs, queue.backoff * 2 or sync.backoff_initial_secs
            )
            queue.rest_until = time.monotonic() + queue.backoff * random.uniform(0.8, 1.2)
        else:
            queue.backoff = 0.0
        if got:
            self._metrics.repairs.inc(got)
            log.info("repaired %s: %d envelope(s) from %s over HTTP", job.journal, got, name)
        after = self.head(job.journal)
        if (
            claimed > before
            and not unreachable
            and (why or not got or after >= min(claimed, job.want))
        ):
            if after >= min(claimed, job.want):
                await self._claims.panned_out(name)
            else:
                await self._claims.fell_short(
                    name, job.journal, claimed, after, why or "it sent no more"
                )
        if after >= job.want:
            self._finish(job)
        elif got and not why:  # more to come from it, after its other journals' turn
            queue.put(job, self._first_choice(name, job))
            job.queued = name
        else:
            job.tried.add(name)
            self._assign(job)

    async def _reread(self, job: _Job) -> None:
        """Receive again, from the stream, what the consumer acknowledged unapplied, once the
        journal reaches the envelope before it (and again only after it moved on)."""
        hold, js = job.hold, self.js
        head = self.head(job.journal)
        if hold is None or js is None or head < hold.seq - 1 or head <= job.reread_at:
            return
        job.reread_at = head
        position = _Position(hold.stream_seq)
        chunk: list[tuple[int, list[msgspec.Raw]]] = []  # (stream seq, its envelopes)
        seq, read = max(1, hold.stream_seq), 0
        try:
            while read < REREAD_MAX_MESSAGES:
                try:
                    msg = await js.get_msg(self._stream, seq=seq, subject=hold.subject, next=True)
                except NotFoundError:
                    break
                read += 1
                at = msg.seq if msg.seq is not None else seq
                seq = at + 1
                chunk.append((at, envelopes_of(msg.data or b"")))
                if len(chunk) >= REREAD_CHUNK:
                    await self._receive_again(chunk, position)
                    chunk = []
            if chunk:
                await self._receive_again(chunk, position)
        except (NatsError, TimeoutError) as exc:
            log.info("re-reading %s from the stream: %s", job.journal, exc)
        if read:
            log.info("re-read %s from the stream: %d message(s)", job.journal, read)
        if position.stream_seq > hold.stream_seq:  # what was applied need not be read again
            job.hold = Hold(hold.subject, position.stream_seq, self.head(job.journal) + 1)
            self._holds_changed = True

    async def _receive_again(
        self, chunk: list[tuple[int, list[msgspec.Raw]]], at: _Position
    ) -> None:
        """Receive re-read messages; `at` moves past those applied whole (or held already)
        up to the first one that still does not apply."""
        items = [envelope for _, envelopes in chunk for envelope in envelopes]
        outcome = await self._receiver.receive(STREAM_PEER, items)
        if at.blocked:
            return
        gapped = {r.index for r in outcome.rejections if r.reason == GAP}
        index = 0
        for stream_seq, envelopes in chunk:
            if any(i in gapped for i in range(index, index + len(envelopes))):
                at.blocked = True
                return
            index += len(envelopes)
            at.stream_seq = stream_seq + 1


class _Position:
    """How far a re-read of the stream applied without a hole."""

    __slots__ = ("blocked", "stream_seq")

    def __init__(self, stream_seq: int) -> None:
        self.stream_seq = stream_seq
        self.blocked = False
