"""What the receive rules believe of journals whose moves are screened but not yet folded.

A batch's moves (takeovers, handoffs, placements) count for the envelopes after them before the
journals projection says so: the batch is screened before it commits, and a NATS consumer
stages the next batch while this one commits. `Pending` is what the projection will say of a
journal once the batch that noted it is folded; `Screening` is one batch's screening.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

from eventstore.store import ForeignEnvelope, ImportResult
from node.context import NodeContext
from node.sync.rules.judging import TakeoverClaim, Verdict
from projections.journals import Journals

# a move screened but not folded this long after is forgotten (a batch commits in well under
# a second; one whose settle never came must not decide who writes a journal for ever)
PENDING_SECS = 60.0


@dataclass
class Pending:
    """A journal's home, epoch and placement once the moves screened for it are folded."""

    home: str | None
    epoch: int
    placement: tuple[str, ...] | None
    token: int  # the screening that set it (`Screening.token`)
    at: float  # time.monotonic() when noted
    from_seq: int = 0  # `home` writes from this seq on; `previous` before it
    previous: str | None = None

    def writer_at(self, seq: int) -> str | None:
        return self.home if seq >= self.from_seq else self.previous


@dataclass
class Screening:
    """One batch's screening: what it noted, for the batch and for the ones staged after."""

    token: int
    new_homes: dict[str, str] = field(default_factory=dict)  # journals this batch starts
    moves: dict[int, tuple[str, str]] = field(default_factory=dict)  # index → (journal, home)
    forks: list[int] = field(default_factory=list)  # indices of takeovers at a held seq
    takeovers: int = 0  # takeovers seen, accepted or not
    # takeovers that passed the envelope's own checks, for the judge: index → claim
    claims: dict[int, TakeoverClaim] = field(default_factory=dict)
    verdicts: dict[int, Verdict] = field(default_factory=dict)  # the judge's refusals
    # journal → the highest seq among the part's envelopes screened so far (a takeover beyond
    # it and this node's head is a gap: moves.MoveRules.takeover)
    reach: dict[str, int] = field(default_factory=dict)
    # takeovers this node refused as the journal's live home: it refutes them once committed
    refuted: list[tuple[TakeoverClaim, Verdict]] = field(default_factory=list)
    # moves (takeovers, handoffs) read, by index: their signatures are checked before any
    # of them is judged or reported, so a forgery names nobody (`Screening.forged`)
    moves_read: dict[int, ForeignEnvelope] = field(default_factory=dict)
    forged: dict[int, ImportResult] = field(default_factory=dict)
    # moves refused whatever the journal's state (moves.plan_moves): index → reason, detail
    refused: dict[int, tuple[str, str]] = field(default_factory=dict)
    critical: list[tuple[str, str, str]] = field(default_factory=list)  # equivocations of moves
    # journal → the unjudged takeover's seq, when this batch holds its writer's own envelope
    # there (the store imports what follows it only if that one is stored)
    settling: dict[str, int] = field(default_factory=dict)
    incidents: list[tuple[str, str, str]] = field(default_factory=list)  # key, title, detail


class PendingBook:
    """The moves screened and not yet folded, and the takeovers not judged yet."""

    def __init__(self, ctx: NodeContext) -> None:
        self._ctx = ctx
        self._pending: dict[str, Pending] = {}
        self._tokens = itertools.count(1)
        # journal → seq of a takeover that could not be judged yet: it and what follows it
        # are gaps (repaired, so judged again, later), not envelopes of the old writer
        self.unjudged: dict[str, int] = {}

    def screening(
        self,
        verdicts: dict[int, Verdict] | None = None,
        forged: dict[int, ImportResult] | None = None,
        refused: dict[int, tuple[str, str]] | None = None,
    ) -> Screening:
        """A new batch's screening (the judge's verdicts, the forged moves and the ones
        refused whatever the state, if known)."""
        return Screening(
            next(self._tokens),
            verdicts=verdicts or {},
            forged=forged or {},
            refused=refused or {},
        )

    def note(
        self,
        stream: str,
        home: str | None,
        epoch: int,
        placement: tuple[str, ...] | None,
        batch: Screening,
        from_seq: int,
        previous: str | None,
    ) -> None:
        """What the journals projection will say of `stream` once this batch is folded."""
        self._pending[stream] = Pending(
            home, epoch, placement, batch.token, time.monotonic(), from_seq, previous
        )

    def pending_of(self, stream: str) -> Pending | None:
        """What a screening noted for `stream`, unless its batch should long be folded (a
        staged batch that was never settled: its caller went away)."""
        pending = self._pending.get(stream)
        if pending is not None and time.monotonic() - pending.at > PENDING_SECS:
            del self._pending[stream]
            return None
        return pending

    def placement_of(self, stream: str) -> tuple[str, ...] | None:
        pending = self.pending_of(stream)
        if pending is not None and pending.placement is not None:
            return pending.placement
        return self._ctx.projections.get(Journals).placement_of(stream)

    def forget(self, screening: Screening) -> None:
        """Drop what this screening noted (its batch is folded, or failed)."""
        for stream in [s for s, p in self._pending.items() if p.token == screening.token]:
            del self._pending[stream]
