"""What a resuming client missed, read back from the journal in chunks, off the event loop.

The read stops at the position that was current when the client subscribed: everything after
it reaches the client's queue live, so the seam has neither gap nor duplicate.

A chunk is bounded by bytes as well as by count (an event may weigh 256 KiB), its frames are
encoded in the worker thread, and the next chunk is read only once the caller has written
this one (an async generator runs on demand): a replay holds about one chunk whatever the
journal holds, and ten replays of a journal of big events hold about ten chunks.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from eventstore.store import EventStore
from node.streams.frames import Item
from node.streams.mapping import TaskChanges, a2a_item, unified_item

CHUNK = 1000  # envelopes per read, at most
CHUNK_BYTES = 256 * 1024  # stored bytes per read: it stops once past this (a big event: alone)


async def backlog(
    store: EventStore,
    channel: str,
    agent: str | None,
    after: int,
    upto: int,
    changes: TaskChanges,
) -> AsyncGenerator[list[Item], None]:
    """Chunks of items with after < position <= upto, in order, for one channel (and agent)."""
    if after >= upto:
        return
    if agent is not None:
        seq = await asyncio.to_thread(first_seq_after, store, agent, after)
        while seq is not None:
            chunk, seq = await asyncio.to_thread(_agent_chunk, store, agent, seq, upto)
            if chunk:
                yield chunk
        return
    position = after
    while position < upto:
        chunk, position, done = await asyncio.to_thread(
            _all_chunk, store, channel, position, upto, changes
        )
        if chunk:
            yield chunk
        if done:
            return


def _all_chunk(
    store: EventStore,
    channel: str,
    after: int,
    upto: int,
    changes: TaskChanges,
) -> tuple[list[Item], int, bool]:
    envelopes = store.read_all_bounded(after, CHUNK, CHUNK_BYTES)
    items: list[Item] = []
    last = after
    for envelope in envelopes:
        if envelope.position > upto:
            return _encoded(items), last, True
        last = envelope.position
        item = unified_item(envelope) if channel == "events" else a2a_item(envelope, changes)
        if item is not None:
            items.append(item)
    return _encoded(items), last, not envelopes


def first_seq_after(store: EventStore, stream: str, position: int) -> int | None:
    """The first seq of `stream` whose position is past `position` (positions grow with seq)."""
    head = store.head(stream)
    if head is None:
        return None
    lo, hi = 1, head.seq + 1
    while lo < hi:
        mid = (lo + hi) // 2
        envelope = store.get(stream, mid)
        if envelope is not None and envelope.position > position:
            hi = mid
        else:
            lo = mid + 1
    return lo if lo <= head.seq else None


def _agent_chunk(
    store: EventStore, stream: str, seq: int, upto: int
) -> tuple[list[Item], int | None]:
    envelopes = store.read_stream_bounded(stream, seq - 1, CHUNK, CHUNK_BYTES)
    items: list[Item] = []
    for envelope in envelopes:
        if envelope.position > upto:
            return _encoded(items), None
        item = unified_item(envelope)
        if item is not None:
            items.append(item)
    if not envelopes:
        return items, None
    return _encoded(items), envelopes[-1].seq + 1


def _encoded(items: list[Item]) -> list[Item]:
    """Encode the frames here, in the worker thread, rather than on the event loop."""
    for item in items:
        _ = item.frame
    return items
