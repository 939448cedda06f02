"""Which journals exist, how far each goes, and which node is each one's home (its writer).

A journal's first home is the origin of its seq 1, at epoch 0. It changes only by a signed
event in the journal itself (docs/mesh.md, "Placement and failover"): `journal.handoff`, by
the current home, names the next one; `journal.takeover` is the first envelope of a new home
that won the journal's lease. Each raises the epoch; one that does not is not folded (peers
refuse it before it is stored: node/sync/rules/). `agent.placed` says which nodes may host
the agent. A journal's **owner** is the signer of its seq 1 too, and changes only by an
`agent.owner_handed` the owner signed: the one node whose decisions (definition, set, stop,
start, removal) every node accepts (node/sync/rules/owner.py). These events are rare: the
registry hands them to `apply_rare` one by one (`rare`, projections/base.py), so the batched
fold of every other envelope does not look for them.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

from eventstore.envelope import Envelope
from projections.catalogue import (
    AGENT_OWNER_HANDED,
    AGENT_PLACED,
    JOURNAL_HANDOFF,
    JOURNAL_TAKEOVER,
    AgentOwnerHanded,
    AgentPlaced,
    JournalHandoff,
    JournalTakeover,
    read,
)

_stream, _seq = attrgetter("stream"), attrgetter("seq")
PLACEMENT_TYPES = frozenset({AGENT_PLACED, JOURNAL_HANDOFF, JOURNAL_TAKEOVER, AGENT_OWNER_HANDED})
MAX_MOVES = 20  # moves kept per journal (the newest)


class Journals:
    name = "journals"
    rare = PLACEMENT_TYPES  # folded by `apply_rare`, before the batch's `apply_many`

    def __init__(self) -> None:
        self.home: dict[str, str] = {}
        self.owner: dict[str, str] = {}  # the signer of seq 1, or whom its owners handed it
        self.head: dict[str, int] = {}
        # only journals that ever changed home or were placed
        self.epoch: dict[str, int] = {}
        self.placement: dict[str, tuple[str, ...]] = {}
        self.moves: dict[str, list[dict[str, Any]]] = {}

    def apply(self, envelope: Envelope) -> None:
        self.home.setdefault(envelope.stream, envelope.event.origin)
        self.owner.setdefault(envelope.stream, envelope.event.origin)
        self.head[envelope.stream] = envelope.seq
        if envelope.event.type in PLACEMENT_TYPES:
            self._placement_event(envelope)

    def apply_many(self, envelopes: list[Envelope]) -> None:
        """`apply` of each, in C-level passes (a replay folds every envelope here): the
        heads in one `update`, the homes only when a batch names a journal not seen before
        (after the heads' update, `home` holds a subset of `head`'s journals: equal sizes mean
        the same ones). The moves are `apply_rare`'s."""
        home, head = self.home, self.head
        head.update(zip(map(_stream, envelopes), map(_seq, envelopes), strict=True))
        if len(head) != len(home):
            for envelope in envelopes:
                home.setdefault(envelope.stream, envelope.event.origin)
        owner = self.owner
        if len(head) != len(owner):
            for envelope in envelopes:
                owner.setdefault(envelope.stream, envelope.event.origin)

    def apply_rare(self, envelope: Envelope) -> None:
        """A placement event: idempotent (a move that does not raise the epoch is ignored)."""
        self._placement_event(envelope)

    def _placement_event(self, envelope: Envelope) -> None:
        stream, event = envelope.stream, envelope.event
        current = self.epoch.get(stream, 0)
        if envelope.seq == 1:  # folded before the batch's `apply_many`
            self.owner.setdefault(stream, event.origin)
        if event.type == AGENT_OWNER_HANDED:
            handed = read(AgentOwnerHanded, event.data)
            if handed is not None and self.owner.get(stream) == event.origin:
                self.owner[stream] = handed.to
            return
        if event.type == AGENT_PLACED:
            placed = read(AgentPlaced, event.data)
            if placed is not None:
                self.placement[stream] = tuple(placed.placement)
            return
        move: JournalHandoff | JournalTakeover | None
        if event.type == JOURNAL_HANDOFF:
            move = read(JournalHandoff, event.data)
            to = move.to if move is not None else ""
            reason = "handoff"
            previous = self.home.get(stream) or event.origin  # the handoff's signer
        else:
            move = read(JournalTakeover, event.data)
            to, reason = event.origin, "takeover"
            previous = self.home.get(stream) or (move.previous_home if move else "")
        if move is None or move.epoch <= current:
            return
        self.home[stream], self.epoch[stream] = to, move.epoch
        moves = self.moves.setdefault(stream, [])
        moves.append(
            {
                "seq": envelope.seq,
                "epoch": move.epoch,
                "from": previous,
                "to": to,
                "reason": reason,
                "at": event.ts,
            }
        )
        del moves[:-MAX_MOVES]

    def home_of(self, stream: str) -> str | None:
        """The node that writes `stream` now (after its handoffs and takeovers)."""
        return self.home.get(stream)

    def owner_of(self, stream: str) -> str | None:
        """The node whose signature alone decides what the agent is and whether it runs."""
        return self.owner.get(stream)

    def epoch_of(self, stream: str) -> int:
        """0 until the journal's first handoff or takeover."""
        return self.epoch.get(stream, 0)

    def placement_of(self, stream: str) -> tuple[str, ...] | None:
        """The nodes of the journal's latest `agent.placed`, or None if never placed."""
        return self.placement.get(stream)

    def moves_of(self, stream: str) -> list[dict[str, Any]]:
        """Its last MAX_MOVES handoffs and takeovers, oldest first:
        {seq, epoch, from, to, reason, at}."""
        return [dict(move) for move in self.moves.get(stream, ())]

    def writer_at(self, stream: str, seq: int) -> str | None:
        """Who wrote (or writes) `seq` of `stream` by its moves: a handoff at seq S hands
        seq S + 1 on, a takeover at S is its new home's own. None when that seq is older than
        the move history kept."""
        moves = self.moves.get(stream)
        if not moves:
            return self.home.get(stream)
        writer = None
        for move in moves:
            starts = move["seq"] + (1 if move["reason"] == "handoff" else 0)
            if seq < starts:
                return writer if writer is not None else self._first_of(moves, stream)
            writer = move["to"]
        return writer

    def writers_from(self, stream: str, seq: int) -> set[str]:
        """Every node that wrote (or writes) `stream` from `seq` on: whoever wrote `seq` and
        each node a later move made its writer."""
        writers = {w for w in (self.writer_at(stream, seq),) if w is not None}
        for move in self.moves.get(stream, ()):
            if move["seq"] + (1 if move["reason"] == "handoff" else 0) > seq:
                writers.add(move["to"])
        return writers

    def _first_of(self, moves: list[dict[str, Any]], stream: str) -> str | None:
        """The writer before the oldest kept move, if the history still starts at epoch 1."""
        return moves[0]["from"] if moves[0]["epoch"] == 1 else None

    def snapshot(self) -> dict[str, Any]:
        return {
            "home": dict(sorted(self.home.items())),
            "owner": dict(sorted(self.owner.items())),
            "head": dict(sorted(self.head.items())),
            "epoch": dict(sorted(self.epoch.items())),
            "placement": {k: list(v) for k, v in sorted(self.placement.items())},
            "moves": dict(sorted(self.moves.items())),
        }
