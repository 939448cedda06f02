"""A move's own checks at screening: who may take a journal over or hand it off, and to whom.

A journal changes writer only by a signed event in it (docs/mesh.md, "Placement and
failover"): a `journal.handoff` from its home, naming a node of its placement set, at the
epoch after the journal's; or a `journal.takeover` from a node of its placement set at the
epoch after the journal's, that the placement layer's judge (judging.py) finds sound against
the mesh. A refused move is journaled as a finding naming its signer (BAD_HANDOFF,
BAD_TAKEOVER). An `agent.placed` changes the set the next moves are checked against.
"""

from __future__ import annotations

import base64
from collections.abc import Container
from typing import NamedTuple

import msgspec

from eventstore.envelope import SIG_PREFIX, Event, decode_event, digest_of
from eventstore.store import ForeignEnvelope, ImportStatus
from node.context import NodeContext
from node.sync.rules.judging import TakeoverClaim
from node.sync.rules.outcome import BAD_HANDOFF, BAD_TAKEOVER, GAP
from node.sync.rules.pending import PendingBook, Screening
from projections.catalogue import (
    AGENT_PLACED,
    JOURNAL_TAKEOVER,
    MAX_TEXT,
    AgentPlaced,
    JournalHandoff,
    JournalTakeover,
    read,
)

DUPLICATE = ImportStatus.DUPLICATE.value
EQUIVOCATION = ImportStatus.EQUIVOCATION.value
MAX_MOVES_SEEN = 4096  # moves remembered for their equivocations (about 1 KiB each)


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
        if takeover.previous_home != home:  # the journal's moves (and `writer_at`) say it
            return self.bad_takeover(
                item, event, batch, f"it names {takeover.previous_home!r} as the home it replaces"
            )
        head = self._ctx.store.head(stream)
        held = head.seq if head is not None else 0
        reach = max(held, batch.reach.get(stream, 0))
        if item.seq > reach + 1:
            # nothing before it here reaches its seq: the store refuses it as a gap, and what
            # the batch would note of it (its signer the writer from its seq) must not stand
            return GAP, f"takeover of {stream} at seq {item.seq}: this node holds up to {reach}"
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
            stream,
            item.seq,
            event.origin,
            takeover.epoch,
            home,
            epoch,
            held,
            event.ts,
            prev=event.prev,
            digest=digest_of(item.payload).hex(),
            lease_position=takeover.lease_position,
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


class MovePlan(NamedTuple):
    """What a batch's moves come to before any is judged: the index the batch is cut at (a
    second move of a journal: it and what follows wait for the next part), and the moves
    refused whatever the journal's state (index → reason, detail)."""

    cut: int | None
    refused: dict[int, tuple[str, str]]
    incidents: list[tuple[str, str, str]]  # key, title, detail: critical findings


def plan_moves(
    moves: dict[int, ForeignEnvelope], forged: Container[int], seen: MovesSeen
) -> MovePlan:
    """At most one move per journal per part of a batch, each judged against the exact state
    it is applied to; a copy of a move earlier in the batch is a duplicate; two different moves
    at the same seq and epoch from one signer are an equivocation (`MovesSeen`)."""
    firsts: dict[str, int] = {}  # journal → index of its move in this part
    digests: dict[str, int] = {}  # digest → index, of this batch's moves
    refused: dict[int, tuple[str, str]] = {}
    incidents: list[tuple[str, str, str]] = []
    for index in sorted(moves):
        if index in forged:
            continue
        item = moves[index]
        digest = digest_of(item.payload).hex()
        if digest in digests:
            refused[index] = (
                DUPLICATE,
                f"the same move as envelope {digests[digest]} of this batch",
            )
            continue
        equivocation = seen.equivocation(item, digest)
        if equivocation is not None:
            refused[index] = (EQUIVOCATION, equivocation[2])
            incidents.append(equivocation)
            continue
        if item.stream in firsts:
            return MovePlan(index, refused, incidents)
        firsts[item.stream] = index
        digests[digest] = index
        seen.note(item, digest)
    return MovePlan(None, refused, incidents)


class MovesSeen:
    """The moves whose signature held, by (journal, seq, epoch, signer): a different move under
    the same key is an equivocation, refused wherever it comes (bounded: the oldest forgotten)."""

    def __init__(self, limit: int = MAX_MOVES_SEEN) -> None:
        self._seen: dict[tuple[str, int, int, str], tuple[str, bytes, bytes]] = {}
        self._limit = limit

    @staticmethod
    def key_of(item: ForeignEnvelope) -> tuple[str, int, int, str] | None:
        event = decode_event(item.payload)
        move: JournalTakeover | JournalHandoff | None
        if event.type == JOURNAL_TAKEOVER:
            move = read(JournalTakeover, event.data)
        else:
            move = read(JournalHandoff, event.data)
        if move is None:
            return None
        return item.stream, item.seq, move.epoch, event.origin

    def note(self, item: ForeignEnvelope, digest: str) -> None:
        key = self.key_of(item)
        if key is None or key in self._seen:
            return
        if len(self._seen) >= self._limit:
            del self._seen[next(iter(self._seen))]
        self._seen[key] = (digest, item.payload, item.signature)

    def equivocation(self, item: ForeignEnvelope, digest: str) -> tuple[str, str, str] | None:
        """(finding key, title, detail carrying both envelopes) when `item` is a different move
        under a key seen before; else None."""
        key = self.key_of(item)
        first = self._seen.get(key) if key is not None else None
        if key is None or first is None or first[0] == digest:
            return None
        stream, seq, epoch, signer = key
        both = {
            "journal": stream,
            "seq": seq,
            "epoch": epoch,
            "signer": signer,
            "first": _as_pushed(stream, seq, first[1], first[2]),
            "second": _as_pushed(stream, seq, item.payload, item.signature),
        }
        detail = msgspec.json.encode(both).decode()
        if len(detail) > MAX_TEXT:
            detail = (
                f"journal {stream} seq {seq} epoch {epoch} by {signer!r}: moves sha256:{first[0]} "
                f"and sha256:{digest} (too large to quote)"
            )
        title = (
            f"equivocation of moves in journal {stream} at seq {seq}: node {signer} signed two "
            f"different moves at epoch {epoch}; both refused"
        )
        return f"move-equivocation/{stream}/{seq}/{epoch}/{signer}", title, detail


def _as_pushed(stream: str, seq: int, payload: bytes, signature: bytes) -> dict[str, object]:
    return {
        "seq": seq,
        "agent": stream,
        "payload": base64.b64encode(payload).decode(),
        "signature": SIG_PREFIX + base64.b64encode(signature).decode(),
    }
