"""Wait until this node's copy of a journal holds everything the mesh's stream holds of it.

A node that is about to become an agent's home (a takeover, a handoff, a start) must first
hold every envelope the old home got acknowledged: else it would write after a gap, or fork
from an acknowledged write. What the stream holds of a journal from a node is the seq of the
last envelope in the last message on that node's subject for it, counted only when that
envelope is of the journal and signed by that node (its pinned key). A message id says the same
but is the publisher's word, not a signature: a member could put any number there, and so hold
an agent down (an honest home waiting for history that does not exist). A message that is not
such an envelope counts as nothing here; the consumer refuses it and reports its publisher.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterable

from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.api import RawStreamMsg
from nats.js.errors import NotFoundError

from eventstore.imports import KeyLookup, Verified, precheck
from node.context import NodeContext
from node.ops.polling import DeadlineExceeded, until
from node.sync.nats.envelopes import envelopes_of
from node.sync.nats.subjects import durable_name, stream_name, subject
from node.sync.wire import MalformedEnvelope, parse_envelope
from projections.journals import Journals

CATCH_UP_POLL_SECS = 0.05
GET_TIMEOUT_SECS = 2.0
log = logging.getLogger("agent-node.placement")


async def stream_holds(
    js: JetStreamContext, mesh: str, journal: str, writers: Iterable[str], lookup: KeyLookup
) -> int:
    """The highest seq of `journal` the stream holds, signed, on the subjects of `writers`
    (0: none)."""
    best = 0
    async for node, last in _last_messages(js, mesh, journal, writers):
        best = max(best, signed_seq(last.data or b"", journal, node, lookup))
    return best


async def stream_signed_at(
    js: JetStreamContext,
    mesh: str,
    journal: str,
    node: str,
    seq: int,
    lookup: KeyLookup,
    prev: str | None = None,
    *,
    before: int | None = None,
) -> bool:
    """Whether the stream holds `node`'s signed envelope of `journal` at exactly `seq` (at a
    stream position below `before`, when given: the prefix a takeover is judged by): the
    first of its messages on its subject whose last envelope reaches `seq`, found by a binary
    search over the stream's positions (a node's messages of one journal are runs in order);
    with `prev`, only an envelope that follows that digest (a sibling of the envelope asked
    about: history it would overtake, not a signer's envelope that extends nothing). Not
    knowing (its messages before that one aged out of the stream) answers True, the safe answer
    for a judge: the takeover would erase what the stream may have acknowledged."""
    name, where = stream_name(mesh), subject(mesh, node, journal)

    async def first_from(position: int) -> tuple[int, list[int], dict[int, str]] | None:
        try:
            msg = await asyncio.wait_for(
                js.get_msg(name, seq=position, subject=where, next=True), GET_TIMEOUT_SECS
            )
        except NotFoundError:
            return None
        prevs = signed_prevs(msg.data or b"", journal, node, lookup)
        return int(msg.seq or 0), list(prevs), prevs

    first = await first_from(1)
    try:
        tail = await asyncio.wait_for(js.get_last_msg(name, where), GET_TIMEOUT_SECS)
    except NotFoundError:
        return False
    if first is None or (before is not None and first[0] >= before):
        return False
    lo, hi = first[0], int(tail.seq or 0)
    if before is not None:
        hi = min(hi, before - 1)
    for _ in range(64):  # log2 of any stream's positions
        if lo >= hi:
            break
        mid = (lo + hi) // 2
        probe = await first_from(mid)  # its first message at `mid` or after
        if probe is None:
            break
        position, seqs, _ = probe
        if (seqs and seqs[-1] >= seq) or (before is not None and position >= before):
            hi = mid
        else:
            lo = position + 1
    found = await first_from(lo)
    if found is None or not found[1] or found[1][-1] < seq:
        return False
    if before is not None and found[0] >= before:
        return False
    if seq in found[1]:
        return prev is None or found[2][seq] == prev  # else it follows another: no sibling
    if found[0] == first[0] and found[1][0] > seq:  # its earlier messages may have aged out
        info = await asyncio.wait_for(js.stream_info(name), GET_TIMEOUT_SECS)
        return int(info.state.first_seq or 1) > 1
    return False


def signed_prevs(data: bytes, journal: str, node: str, lookup: KeyLookup) -> dict[int, str]:
    """The seqs of a message's envelopes of `journal` that `node` signed, in order, each with
    the digest it follows (its event's `prev`)."""
    items = []
    for raw in envelopes_of(data):
        try:
            item = parse_envelope(raw)
        except MalformedEnvelope:
            continue
        if item.stream == journal:
            items.append(item)
    if not items:
        return {}
    checked = precheck(items, lookup)
    return {
        item.seq: result.event.prev
        for item, result in zip(items, checked, strict=True)
        if isinstance(result, Verified) and result.event.origin == node
    }


def signed_seq(data: bytes, journal: str, node: str, lookup: KeyLookup) -> int:
    """The seq of the last envelope in a message, when it is `journal`'s and `node` signed
    it; else 0."""
    envelopes = envelopes_of(data)
    try:
        item = parse_envelope(envelopes[-1]) if envelopes else None
    except MalformedEnvelope:
        item = None
    if item is None or item.stream != journal:
        return 0
    (checked,) = precheck([item], lookup)
    if not isinstance(checked, Verified) or checked.event.origin != node:
        # the consumer refuses and reports such a message; a member's junk, repeated on every
        # look, must not fill this node's log
        log.debug("the stream's last message of %s from %s is no envelope it signed", journal, node)
        return 0
    return item.seq


async def caught_up(
    ctx: NodeContext,
    js: JetStreamContext,
    journal: str,
    writers: Iterable[str],
    lookup: KeyLookup,
    deadline: float,
) -> bool:
    """True once the local head of `journal` reaches what the stream holds of it from the
    nodes this node's copy names as its writers (their signed envelopes are its history), and
    what `writers`' other nodes put there either is reached too or has been read and refused
    (this node's consumer acknowledged the message that holds it); False when `deadline`
    (time.monotonic()) passes first.

    A member of the set that signs envelopes ahead of the head (takeovers this node refused,
    definitions of its own) would else hold an honest takeover back for good: the bench's
    attack run (bench/failover.py --attack-kills) saw no takeover within 30 s."""
    mesh = ctx.config.mesh.name
    journals = ctx.projections.get(Journals)
    known = set(journals.writers_from(journal, 1))
    home = journals.home_of(journal)
    if home is not None:
        known.add(home)
    others = [node for node in writers if node not in known]
    history = await stream_holds(js, mesh, journal, sorted(known), lookup)
    ahead = await stream_holds(js, mesh, journal, others, lookup) if others else 0
    position = await _last_position(js, mesh, journal, others) if ahead else 0
    heads = journals.head

    async def reached() -> bool:
        head = heads.get(journal, 0)
        if head < history:
            return False
        try:
            return head >= ahead or await read_through(js, mesh, ctx.name, position)
        except (NatsError, TimeoutError):  # asked again at the next poll
            return False

    try:
        await until(
            reached,
            max(0.0, deadline - time.monotonic()),
            f"{journal} caught up with the stream",
            CATCH_UP_POLL_SECS,
        )
    except DeadlineExceeded:
        return False
    return True


async def written_ahead(
    ctx: NodeContext,
    js: JetStreamContext,
    journal: str,
    writers: Iterable[str],
    lookup: KeyLookup,
    seq: int,
) -> int:
    """The highest seq of `journal`, `seq` or later, that a node of `writers` put in the stream,
    signed, and this node took into its copy or may still take (0: none). A message this
    node's consumer has read and acknowledged without taking its writer's envelope at that seq
    was refused (a member's takeover the judge refused): no history, and no reason to wait, else
    one refused envelope ahead of the head would keep a named home from starting and a taker
    from taking over, for good."""
    mesh = ctx.config.mesh.name
    best = 0
    async for node, last in _last_messages(js, mesh, journal, writers):
        held = signed_seq(last.data or b"", journal, node, lookup)
        if held < seq or held <= best:
            continue
        mine = ctx.store.get(journal, held)
        taken = mine is not None and mine.event.origin == node
        if not taken and await read_through(js, mesh, ctx.name, int(last.seq or 0)):
            continue
        best = held
    return best


async def _last_position(js: JetStreamContext, mesh: str, journal: str, nodes: list[str]) -> int:
    """The stream position of the last message of `journal` on the subjects of `nodes`."""
    position = 0
    async for _, last in _last_messages(js, mesh, journal, nodes):
        position = max(position, int(last.seq or 0))
    return position


async def read_through(js: JetStreamContext, mesh: str, node: str, position: int) -> bool:
    """Whether this node's consumer has had every message up to stream `position` delivered
    and acknowledged (it acknowledges a batch once it is committed, whatever it refused)."""
    info = await asyncio.wait_for(
        js.consumer_info(stream_name(mesh), durable_name(node)), GET_TIMEOUT_SECS
    )
    floor = info.ack_floor.stream_seq if info.ack_floor is not None else 0
    return int(floor or 0) >= position


async def _last_messages(
    js: JetStreamContext, mesh: str, journal: str, nodes: Iterable[str]
) -> AsyncIterator[tuple[str, RawStreamMsg]]:
    """The last message of `journal` on each of `nodes`' subjects that holds one."""
    for node in nodes:
        try:
            last = await asyncio.wait_for(
                js.get_last_msg(stream_name(mesh), subject(mesh, node, journal)),
                GET_TIMEOUT_SECS,
            )
        except NotFoundError:
            continue
        yield node, last
