"""What a takeover must show before this node lets it change a journal's writer.

The receive path (node/sync/rules/) checks what the envelope itself says: signed by a node
of the journal's placement set, raising its epoch by exactly one, following this node's copy
(or forking it at a seq whose `prev` is ours). A signature says who wrote it, not that it is
sane: the checks here ask the mesh's stream what the takeover cannot prove by itself. Every
verdict is a function of the stream's prefix before the takeover's lease record alone (the lease
log, node/placement/leaselog.py), so two honest nodes that read the same stream at different
times decide alike. The takeover of J by T from its home H is refused (reported, naming T) when:

- it names no stream position of T's acquire record (`lease_position`: takeovers of versions
  before the lease log), or the message there is not T's validly signed lease record of J at
  the takeover's epoch;
- T's first envelope message of J in the stream after that record does not hold the takeover
  (an honest taker writes nothing of J between its acquire and its takeover), or that message
  was stamped more than a TTL after the record (an old acquire record, kept to take the agent
  over later, is no licence);
- H's lease is live at the record's position: the stream holds H's signed record of J before
  it, stamped within a TTL before it. A home that wrote its records is home there, whatever
  any node believes now, and an honest home writes no envelope once the log can show it
  lapsed (its write fence, node/placement/leases.py);
- the stream holds, before that position, a signed envelope of J at the takeover's seq from H,
  or from whoever wrote the part of this node's copy the takeover would remove, following what
  the takeover follows (a sibling): the takeover would overtake history the stream
  acknowledged (an honest taker reads the stream through its acquire record first,
  node/placement/takeover.py, so it never does). What H or anyone wrote after that position is
  no history: an honest H was fenced by then.

With no NATS link (or a stream that does not answer, or the takeover not in the stream yet)
nothing is known: the takeover and what follows it are a gap for now (not reported), repaired
(so judged again) later. A lease record the stream no longer holds (it aged out: a node down
longer than `stream_max_age_secs`) is refused and reported: the stream cannot say.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Callable
from typing import Protocol

import msgspec
from nats.errors import Error as NatsError
from nats.js import JetStreamContext

from eventstore.envelope import digest_of
from node.context import NodeContext
from node.placement import leaselog
from node.placement.catchup import stream_holds, stream_signed_at
from node.placement.leaselog import Logged
from node.placement.leases import LeaseBook, LeaseError
from node.placement.metrics import PlacementMetrics
from node.placement.records import LeaseRecord
from node.sync.nats.envelopes import envelopes_of
from node.sync.nats.subjects import subject
from node.sync.rules.judging import TakeoverClaim, Verdict
from node.sync.rules.outcome import UNJUDGED
from projections.journals import Journals

log = logging.getLogger("agent-node.placement")
JUDGE_TIMEOUT_SECS = 5.0


class MeshView(Protocol):
    """What the judge reads of the mesh's stream (NatsView; the model of the receive rules
    hands NatsView a stream of its own)."""

    async def record_at(self, position: int) -> Logged | None: ...

    async def live_at(self, journal: str, node: str, at: Logged) -> Logged | None:
        """The record showing `node`'s lease of `journal` live at `at`'s position (None: not)."""
        ...

    async def first_after(self, journal: str, node: str, position: int) -> Logged | None:
        """`node`'s first envelope message of `journal` after stream `position`."""
        ...

    async def holds(self, journal: str, writer: str) -> int:
        """The highest seq of `journal` the stream holds signed by `writer` (0: none)."""
        ...

    async def signed_at(
        self, journal: str, writer: str, seq: int, prev: str | None, before: int
    ) -> bool:
        """Whether the stream holds, before position `before`, `writer`'s signed envelope of
        `journal` at `seq` following the digest `prev`."""
        ...


class NatsView:
    def __init__(self, js: JetStreamContext, leases: LeaseBook, mesh: str) -> None:
        self._js, self._leases, self._mesh = js, leases, mesh

    async def record_at(self, position: int) -> Logged | None:
        return await leaselog.record_at(self._js, self._mesh, position)

    async def live_at(self, journal: str, node: str, at: Logged) -> Logged | None:
        return await leaselog.live_at(
            self._js, self._mesh, journal, node, at, self._leases.ttl, self._leases.lookup
        )

    async def first_after(self, journal: str, node: str, position: int) -> Logged | None:
        where = subject(self._mesh, node, journal)
        return await leaselog.first_after(self._js, self._mesh, where, position)

    async def holds(self, journal: str, writer: str) -> int:
        return await stream_holds(self._js, self._mesh, journal, [writer], self._leases.lookup)

    async def signed_at(
        self, journal: str, writer: str, seq: int, prev: str | None, before: int
    ) -> bool:
        lookup = self._leases.lookup
        return await stream_signed_at(
            self._js, self._mesh, journal, writer, seq, lookup, prev, before=before
        )


class _Payload(msgspec.Struct):
    seq: int
    payload: str


_payload_decoder = msgspec.json.Decoder(_Payload)


def holds_envelope(data: bytes, seq: int, digest: str) -> bool:
    """Whether a stream message holds the envelope at `seq` whose payload's digest (hex) is
    `digest`."""
    for raw in envelopes_of(data):
        try:
            item = _payload_decoder.decode(raw)
            if item.seq == seq and digest_of(base64.b64decode(item.payload)).hex() == digest:
                return True
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError):
            continue
    return False


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
        """The verdict on `claim` as `mesh` shows the stream (module docstring)."""
        taker, home, journal = claim.origin, claim.previous_home, claim.stream
        position = claim.lease_position
        if position <= 0:
            return Verdict("bad_takeover", "it names no lease record of its taker in the stream")
        acquired = await mesh.record_at(position)
        if acquired is None:
            return Verdict(
                "bad_takeover",
                f"the stream holds no message at the position of its lease record ({position}): "
                "aged out, or never there",
            )
        record = leaselog.record_of(
            acquired, self._ctx.config.mesh.name, journal, taker, self._leases.lookup
        )
        if not isinstance(record, LeaseRecord) or record.epoch != claim.epoch:
            why = record if isinstance(record, str) else f"a record at epoch {record.epoch}"
            return Verdict(
                "bad_takeover", f"stream message {position} is not its lease record: {why}"
            )
        entered = await mesh.first_after(journal, taker, position)
        if entered is None:
            return Verdict(UNJUDGED, "the takeover is not in the stream yet", report=False)
        if not holds_envelope(entered.data, claim.seq, claim.digest):
            return Verdict(
                "bad_takeover",
                f"{taker!r}'s first message of it after its lease record ({entered.position}) "
                "does not hold the takeover",
            )
        late = entered.stamp - acquired.stamp
        if late > self._leases.ttl:
            return Verdict(
                "bad_takeover",
                f"it entered the stream {late:.1f} s after its lease record, over the TTL "
                f"({self._leases.ttl:g} s)",
            )
        live = await mesh.live_at(journal, home, acquired)
        if live is not None:
            return Verdict(
                "bad_takeover",
                f"its home {home!r} held a live lease at stream position {position} (its "
                f"record at {live.position}, {acquired.stamp - live.stamp:.1f} s before)",
                refuted=home == self._ctx.name,
            )
        journals = self._ctx.projections.get(Journals)
        writers = {home, *journals.writers_from(journal, claim.seq)} - {taker}
        for writer in sorted(writers):
            held = await mesh.holds(journal, writer)
            if held >= claim.seq and await mesh.signed_at(
                journal, writer, claim.seq, claim.prev, position
            ):
                return Verdict(
                    "bad_takeover",
                    f"the stream holds seq {claim.seq} of it from {writer!r} before its taker's "
                    f"lease record ({position}): the takeover would overtake history the stream "
                    "acknowledged",
                )
        return None
