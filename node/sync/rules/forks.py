"""A fork between epochs: a takeover at a seq this node already holds (an old-epoch tail that
never reached the new home) whose `prev` is our seq before it wins once judged: the store
rewinds the journal to that seq, the takeover is stored, and a critical finding carries both
envelopes. The old epoch's envelopes in the same batch are refused: they must not be stored
again after the rewind."""

from __future__ import annotations

import base64
import logging

import msgspec

from eventstore.envelope import SIG_PREFIX, decode_event, digest_of
from eventstore.store import ForeignEnvelope
from node.context import NodeContext
from node.sync.incidents import Incidents
from node.sync.rules.outcome import FOREIGN_WRITER, PushOutcome, Rejection
from node.sync.rules.pending import Screening
from projections.catalogue import MAX_TEXT

log = logging.getLogger("agent-node.sync")


def old_epoch_refused(
    candidates: list[tuple[int, ForeignEnvelope]],
    screening: Screening,
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


async def resolve_forks(
    ctx: NodeContext,
    incidents: Incidents,
    peer_id: str,
    candidates: list[tuple[int, ForeignEnvelope]],
    screening: Screening,
) -> None:
    """Each takeover at a held seq (its signature holds): journal the fork, rewind the
    journal to the seq before it (the takeover is then imported as the next)."""
    for index in screening.forks:
        item = next(item for i, item in candidates if i == index)
        await resolve_fork(ctx, incidents, peer_id, item)


async def resolve_fork(
    ctx: NodeContext, incidents: Incidents, peer_id: str, item: ForeignEnvelope
) -> None:
    store = ctx.store
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
    await incidents.report(
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
