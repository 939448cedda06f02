"""A batch's screening: everything about an envelope that needs neither its key nor the store.

Checks, in order: readable (seq, agent, base64 payload, `ed25519:` signature, decodable event),
not a node-level `$` journal, its content fits the event catalogue (projections/catalogue.py:
known type, data of the right shape and bounds, a `ts` not too far ahead), not a journal whose
home is this node (ownership.py), written by the journal's home (single writer); a move's own
checks are moves.py's. What passes goes to the store (hash and signature, seq = head + 1,
chain), with the writer the store must find when the journal moved.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import msgspec

from eventstore.envelope import Event, decode_event
from eventstore.imports import KeyLookup, precheck
from eventstore.store import ForeignEnvelope, ImportResult, ImportStatus
from node.context import NodeContext
from node.sync.rules import owner
from node.sync.rules.moves import MoveRules
from node.sync.rules.outcome import (
    FOREIGN_WRITER,
    GAP,
    MOVES,
    NODE_LEVEL,
    PushOutcome,
    Rejection,
)
from node.sync.rules.ownership import OWN_JOURNAL, Ownership
from node.sync.rules.pending import PendingBook, Screening
from node.sync.wire import MalformedEnvelope, agent_of, parse_envelope
from projections.catalogue import (
    AGENT_PLACED,
    JOURNAL_HANDOFF,
    JOURNAL_TAKEOVER,
    CatalogueError,
    JournalTakeover,
    check_replicated,
    read,
)
from projections.journals import Journals
from projections.keys import is_key_journal, key_journal


class Screener:
    def __init__(self, ctx: NodeContext, book: PendingBook, key_of: KeyLookup) -> None:
        self._ctx = ctx
        self._key_of = key_of  # peers' keys: a refused owner decision's signature first
        self._book = book
        self._ownership = Ownership(ctx)
        self._moves = MoveRules(ctx, book)
        self._handed: dict[str, tuple[int, str]] = {}  # owners handed, not folded yet

    def screen(
        self, items: Sequence[msgspec.Raw], outcome: PushOutcome, screening: Screening
    ) -> tuple[list[tuple[int, ForeignEnvelope]], set[str]]:
        """Everything that needs neither key nor head; the rest goes to the store."""
        candidates: list[tuple[int, ForeignEnvelope]] = []
        origins: set[str] = set()
        now = datetime.now(UTC)
        unjudged = self._book.unjudged
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
                refused = screening.refused.get(index)
                if refused is not None:
                    rejection = Rejection(index, item.stream, item.seq, *refused)
                    outcome.rejections.append(rejection)
                    continue
                screening.moves_read[index] = item
            refusal = self._refusal(index, item, event, now, screening)
            if refusal is not None:
                reason, detail = refusal
                outcome.rejections.append(Rejection(index, item.stream, item.seq, reason, detail))
                continue
            if unjudged.get(item.stream) == item.seq and index not in screening.moves:
                screening.settling[item.stream] = item.seq
            writer = self._writer_of(item, event, index, screening)
            if writer is not None:
                item = item._replace(writer=writer)
            origins.add(event.origin)
            candidates.append((index, item))
            screening.reach[item.stream] = max(screening.reach.get(item.stream, 0), item.seq)
        return candidates, origins

    def _refusal(
        self, index: int, item: ForeignEnvelope, event: Event, now: datetime, batch: Screening
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
        unjudged = self._book.unjudged.get(stream)
        if unjudged is not None and item.seq > unjudged and batch.settling.get(stream) != unjudged:
            return GAP, f"after the takeover at seq {unjudged}, not judged yet"
        pending = self._book.pending_of(stream)
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
                    return self._moves.bad_takeover(
                        item, event, batch, f"its epoch {takeover.epoch} is not {epoch + 1}"
                    )
                return self._moves.takeover(index, item, event, takeover, home, epoch, batch)
            if item.seq > held and not (
                takeover is not None and event.origin == home and takeover.epoch == epoch
            ):
                return self._moves.bad_takeover(
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
        if item.seq > held and kind in owner.OWNER_DECISIONS:
            state = owner.Screened(
                journals, item.seq, batch.new_homes, self._handed, self._book.placement_of
            )
            why = owner.screen(state, self._handed, stream, item.seq, event)
            if why is not None:
                # reported only once its signature holds: a forgery names nobody
                (checked,) = precheck([item], self._key_of)
                if isinstance(checked, ImportResult):
                    return checked.status.value, checked.detail
                batch.incidents.append(owner.finding_of(stream, event.origin, why))
                return owner.NOT_OWNER, why
        if item.seq > held and kind in (JOURNAL_HANDOFF, AGENT_PLACED):
            return self._moves.placement(index, item, event, home or event.origin, epoch, batch)
        return None

    def _writer_of(
        self, item: ForeignEnvelope, event: Event, index: int, b: Screening
    ) -> str | None:
        """Who the store must find signed a screened envelope of a journal that moved (a move
        itself: its signer, checked here; the store's own rule, the head's signer, would
        refuse a new home's envelopes). None: a journal that never moved."""
        if index in b.moves:
            return event.origin
        pending = self._book.pending_of(item.stream)
        if pending is not None:
            return pending.writer_at(item.seq)
        journals = self._ctx.projections.get(Journals)
        return journals.home_of(item.stream) if journals.epoch_of(item.stream) > 0 else None
