"""What a takeover must show before this node lets it change a journal's writer.

The receive path (node/sync/rules/) checks what the envelope itself says: signed by a node
of the journal's placement set, raising its epoch by exactly one, following this node's copy
(or forking it at a seq whose `prev` is ours). A signature says who wrote it, not that it is
sane: the checks here ask the mesh's NATS buckets and stream what the takeover cannot prove
by itself, and refuse it (reported, naming its signer) when:

- the journal's home still holds its lease at the epoch taken over: the home's signed record
  in the leases bucket (node/placement/leases.py), which every node reads alike (the home
  itself too: after a restart within a TTL its record outlives what it remembers), or, on the
  home, its own lease. A member cannot take over an agent whose home is alive;
- the stream holds a signed envelope of the journal at the takeover's seq from its home, or
  from whoever wrote the part of this node's copy the takeover would remove: the takeover
  would overtake or erase history the stream acknowledged (an honest new home first catches
  up with the stream, node/placement/catchup.py, so it never does). The stream is read as it
  was at the move: the writer's envelope at that very seq, a sibling of the takeover in the
  epoch taken over, not the writer's last message at any epoch. A writer that took the journal
  back later (a takeover or handoff at a higher epoch) holds later seqs in the stream, and
  they are no erasure: a node that was down during two quick takeovers judges the first one as
  the nodes that were up did, and catches up. Only a sibling counts, an envelope that follows
  what the takeover follows (its `prev`): a signer's envelope at that seq that extends nothing
  (a member's, published ahead at seqs it never held) is no history, and counting it made a
  node that read the stream later refuse a takeover the others had accepted. A sibling counts
  wherever it stands in the stream, before the takeover or after it: the live home that goes
  on writing after refusing a takeover (then hands the agent on, or dies) is what a node that
  reads the stream later must refuse it by, the lease record it was refused by being gone
  (docs/mesh.md, "What is judged when");
- it forks this node's copy over a tail that began more than FORK_SPAN_TTLS lease TTLs (plus
  FORK_SLACK_SECS) before the takeover: an honest old home can write past what the stream has
  only until its lease runs out.

With no NATS link (or a bucket or stream that does not answer) nothing is known: the takeover
and what follows it are a gap for now (not reported), repaired (so judged again) later.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from nats.errors import Error as NatsError
from nats.js import JetStreamContext

from node.context import NodeContext
from node.placement.catchup import stream_holds, stream_signed_at
from node.placement.leases import LeaseBook, LeaseError
from node.placement.metrics import PlacementMetrics
from node.sync.rules.judging import TakeoverClaim, Verdict
from node.sync.rules.outcome import UNJUDGED
from projections.journals import Journals

log = logging.getLogger("agent-node.placement")
FORK_SPAN_TTLS = 2
FORK_SLACK_SECS = 30.0
JUDGE_TIMEOUT_SECS = 5.0


class MeshView(Protocol):
    """What the judge reads of the mesh (NatsView: the leases bucket and the stream; the model
    of the receive rules gives it directly)."""

    async def home_lease_epoch(self, journal: str, home: str) -> int | None:
        """The epoch of `home`'s live lease record of `journal` in the bucket (None: none)."""
        ...

    async def holds(self, journal: str, writer: str) -> int:
        """The highest seq of `journal` the stream holds signed by `writer` (0: none)."""
        ...

    async def signed_at(self, journal: str, writer: str, seq: int, prev: str | None = None) -> bool:
        """Whether the stream holds `writer`'s signed envelope of `journal` at `seq` (following
        the digest `prev`, when given)."""
        ...


class NatsView:
    def __init__(self, js: JetStreamContext, leases: LeaseBook, mesh: str) -> None:
        self._js, self._leases, self._mesh = js, leases, mesh

    async def home_lease_epoch(self, journal: str, home: str) -> int | None:
        view = await self._leases.peek(journal, home, self._js)
        return view.epoch if view is not None else None

    async def holds(self, journal: str, writer: str) -> int:
        return await stream_holds(self._js, self._mesh, journal, [writer], self._leases.lookup)

    async def signed_at(self, journal: str, writer: str, seq: int, prev: str | None = None) -> bool:
        lookup = self._leases.lookup
        return await stream_signed_at(self._js, self._mesh, journal, writer, seq, lookup, prev)


class TakeoverJudge:
    def __init__(
        self,
        ctx: NodeContext,
        leases: LeaseBook,
        link: Callable[[], JetStreamContext | None],
        metrics: PlacementMetrics | None = None,
    ) -> None:
        self._ctx = ctx
        self._leases = leases
        self._js = link  # the live JetStream context, or None
        self._metrics = metrics

    async def judge(self, claim: TakeoverClaim) -> Verdict | None:
        """None when the takeover may stand; else why not."""
        js = self._js()
        if js is None:
            return Verdict(UNJUDGED, "no NATS link to check it against", report=False)
        view = NatsView(js, self._leases, self._ctx.config.mesh.name)
        try:
            async with asyncio.timeout(JUDGE_TIMEOUT_SECS):
                verdict = await self.judge_on(view, claim)
        except (TimeoutError, NatsError, LeaseError) as exc:
            why = f"the mesh did not answer: {type(exc).__name__}"
            return Verdict(UNJUDGED, why, report=False)
        if verdict is not None and self._metrics is not None:
            self._metrics.refused_takeovers.inc()
        return verdict

    async def judge_on(self, mesh: MeshView, claim: TakeoverClaim) -> Verdict | None:
        """The verdict on `claim` as `mesh` shows the leases bucket and the stream."""
        home, epoch, journal = claim.previous_home, claim.previous_epoch, claim.stream
        if home == self._ctx.name and self._leases.holds(journal, epoch):
            return Verdict(
                "bad_takeover",
                f"this node, its home, holds a valid lease at epoch {epoch}",
                refuted=True,
            )
        # the bucket's record, also when this node is the home (it may have restarted within
        # a TTL, or be renewing late): every node judges by the same record
        if await mesh.home_lease_epoch(journal, home) == epoch:
            return Verdict(
                "bad_takeover",
                f"its home {home!r} holds a live lease at epoch {epoch}",
                refuted=home == self._ctx.name,  # this node: it writes the seq (its fence allowing)
            )
        journals = self._ctx.projections.get(Journals)
        writers = {home, *journals.writers_from(journal, claim.seq)} - {claim.origin}
        for writer in sorted(writers):
            held = await mesh.holds(journal, writer)
            if held >= claim.seq and await mesh.signed_at(journal, writer, claim.seq, claim.prev):
                return Verdict(
                    "bad_takeover",
                    f"the stream holds seq {claim.seq} of it from {writer!r} (up to {held}): the "
                    "takeover would overtake or erase history the stream acknowledged",
                )
        if claim.seq <= claim.held:
            return self._fork_span(claim)
        return None

    def _fork_span(self, claim: TakeoverClaim) -> Verdict | None:
        first = self._ctx.store.get(claim.stream, claim.seq)
        if first is None:
            return None
        span = FORK_SPAN_TTLS * self._ctx.config.mesh.lease_ttl_secs + FORK_SLACK_SECS
        try:
            age = (
                datetime.fromisoformat(claim.ts) - datetime.fromisoformat(first.event.ts)
            ).total_seconds()
        except ValueError:
            return Verdict("bad_takeover", "its time or the forked envelope's is unreadable")
        if age > span:
            return Verdict(
                "bad_takeover",
                f"it would remove seqs {claim.seq}..{claim.held}, begun {age:.0f} s before it: "
                f"an old home writes past the stream for at most a lease ({span:.0f} s)",
            )
        return None
