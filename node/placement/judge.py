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
- the stream holds a signed envelope of the journal at the takeover's seq or later from its
  home, or from whoever wrote the part of this node's copy the takeover would remove: the
  takeover would overtake or erase history the stream acknowledged (an honest new home first
  catches up with the stream, node/placement/catchup.py, so it never does);
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

from nats.errors import Error as NatsError
from nats.js import JetStreamContext

from node.context import NodeContext
from node.placement.catchup import stream_holds
from node.placement.leases import LeaseBook, LeaseError
from node.placement.metrics import PlacementMetrics
from node.sync.rules.judging import TakeoverClaim, Verdict
from node.sync.rules.outcome import UNJUDGED
from projections.journals import Journals

log = logging.getLogger("agent-node.placement")
FORK_SPAN_TTLS = 2
FORK_SLACK_SECS = 30.0
JUDGE_TIMEOUT_SECS = 5.0


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
        try:
            async with asyncio.timeout(JUDGE_TIMEOUT_SECS):
                verdict = await self._judge(js, claim)
        except (TimeoutError, NatsError, LeaseError) as exc:
            why = f"the mesh did not answer: {type(exc).__name__}"
            return Verdict(UNJUDGED, why, report=False)
        if verdict is not None and self._metrics is not None:
            self._metrics.refused_takeovers.inc()
        return verdict

    async def _judge(self, js: JetStreamContext, claim: TakeoverClaim) -> Verdict | None:
        home, epoch, journal = claim.previous_home, claim.previous_epoch, claim.stream
        if home == self._ctx.name and self._leases.holds(journal, epoch):
            return Verdict(
                "bad_takeover", f"this node, its home, holds a valid lease at epoch {epoch}"
            )
        # the bucket's record, also when this node is the home (it may have restarted within
        # a TTL, or be renewing late): every node judges by the same record
        view = await self._leases.peek(journal, home, js)
        if view is not None and view.epoch == epoch:
            return Verdict("bad_takeover", f"its home {home!r} holds a live lease at epoch {epoch}")
        journals = self._ctx.projections.get(Journals)
        writers = {home, *journals.writers_from(journal, claim.seq)} - {claim.origin}
        mesh = self._ctx.config.mesh.name
        for writer in sorted(writers):
            held = await stream_holds(js, mesh, journal, [writer], self._leases.lookup)
            if held >= claim.seq:
                return Verdict(
                    "bad_takeover",
                    f"the stream holds seq {held} of it from {writer!r}: the takeover at seq "
                    f"{claim.seq} would overtake or erase history the stream acknowledged",
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
