"""A move's own checks at screening: who may take a journal over or hand it off, and to whom.

A journal changes writer only by a signed event in it (docs/mesh.md, "Placement and
failover"): a `journal.handoff` from its home, naming a node of its placement set, at the
epoch after the journal's; or a `journal.takeover` from a node of its placement set at the
epoch after the journal's, that the placement layer's judge (judging.py) finds sound against
the mesh. A refused move is journaled as a finding naming its signer (BAD_HANDOFF,
BAD_TAKEOVER). An `agent.placed` changes the set the next moves are checked against.
"""

from __future__ import annotations

from eventstore.envelope import Event
from eventstore.store import ForeignEnvelope
from node.context import NodeContext
from node.sync.rules.judging import TakeoverClaim
from node.sync.rules.outcome import BAD_HANDOFF, BAD_TAKEOVER, GAP
from node.sync.rules.pending import PendingBook, Screening
from projections.catalogue import (
    AGENT_PLACED,
    AgentPlaced,
    JournalHandoff,
    JournalTakeover,
    read,
)


class MoveRules:
    def __init__(self, ctx: NodeContext, book: PendingBook) -> None:
        self._ctx = ctx
        self._book = book

    def takeover(
        self,
        index: int,
        item: ForeignEnvelope,
        event: Event,
        takeover: JournalTakeover,
        home: str | None,
        epoch: int,
        batch: Screening,
    ) -> tuple[str, str] | None:
        """A takeover at the next epoch: from a node of the placement set other than its
        home, at the seq after our head, or at a held seq whose `prev` is ours (a fork,
        resolved later); then judged against the mesh (`judge`)."""
        stream = item.stream
        placement = self._book.placement_of(stream)
        if home is None or placement is None:
            return self.bad_takeover(item, event, batch, "the journal was never placed")
        if event.origin not in placement:
            return self.bad_takeover(
                item, event, batch, f"{event.origin!r} is not in its placement set"
            )
        if event.origin == home:
            return self.bad_takeover(item, event, batch, f"{home!r} is its home already")
        head = self._ctx.store.head(stream)
        held = head.seq if head is not None else 0
        if item.seq <= held:
            before = self._ctx.store.get(stream, item.seq - 1) if item.seq > 1 else None
            ours = before.payload_hash if before is not None else ""
            if event.prev != ours:
                return self.bad_takeover(
                    item, event, batch, f"it does not follow this node's seq {item.seq - 1}"
                )
        verdict = batch.verdicts.get(index)
        if verdict is not None:
            if verdict.report:
                self._book.unjudged.pop(stream, None)
                return self.bad_takeover(item, event, batch, verdict.detail)
            self._book.unjudged[stream] = item.seq
            return GAP, f"takeover of {stream} at seq {item.seq} not judged yet: {verdict.detail}"
        batch.claims[index] = TakeoverClaim(
            stream, item.seq, event.origin, takeover.epoch, home, epoch, held, event.ts
        )
        if item.seq <= held:
            batch.forks.append(index)
        self._book.note(stream, event.origin, takeover.epoch, placement, batch, item.seq, home)
        batch.moves[index] = (stream, event.origin)
        return None

    def placement(
        self, index: int, item: ForeignEnvelope, event: Event, home: str, epoch: int, b: Screening
    ) -> tuple[str, str] | None:
        """A new placement set, or a handoff (from the home: to a node of the placement set,
        with a higher epoch), noted for the envelopes after it."""
        stream = item.stream
        if event.type == AGENT_PLACED:
            placed = read(AgentPlaced, event.data)
            if placed is not None:
                before = self._book.pending_of(stream)
                since, previous = (before.from_seq, before.previous) if before else (0, home)
                self._book.note(stream, home, epoch, tuple(placed.placement), b, since, previous)
            return None
        handoff = read(JournalHandoff, event.data)
        placement = self._book.placement_of(stream)
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
        self._book.note(stream, handoff.to, handoff.epoch, placement, b, item.seq + 1, home)
        b.moves[index] = (stream, handoff.to)
        return None

    def bad_takeover(
        self, item: ForeignEnvelope, event: Event, batch: Screening, why: str
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
