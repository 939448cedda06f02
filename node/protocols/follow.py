"""Following one agent's journal live, for the protocol streams.

A cursor reads the envelopes of one journal that the projections have already folded (so a
read model consulted about an envelope agrees with it), and waits for the next commit. It
holds no queue, so a slow client costs nothing but its own socket.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from eventstore.envelope import Envelope
from eventstore.store import EventStore
from node.context import NodeContext
from projections.journals import Journals

READ_CHUNK = 1000
# envelopes' stored bytes per `read`, at most (it stops once it reaches this): a cursor that
# fell behind a busy journal catches up a bounded piece at a time, each written before the next
READ_BYTES = 256 * 1024


class JournalCursor:
    def __init__(self, store: EventStore, stream: str, after_seq: int) -> None:
        self.store = store
        self.stream = stream
        self.after_seq = after_seq
        self._seen = store.last_position

    @classmethod
    def at_head(cls, ctx: NodeContext, stream: str) -> JournalCursor:
        """A cursor after the newest envelope of `stream` the read models have folded."""
        return cls(ctx.store, stream, ctx.projections.get(Journals).head.get(stream, 0))

    def read(self) -> list[Envelope]:
        """The folded envelopes after the cursor, oldest first, up to about `READ_BYTES`;
        advances the cursor. When more remain, `wait` returns at once."""
        delivered = self.store.last_position
        chunk = self.store.read_stream_bounded(self.stream, self.after_seq, READ_CHUNK, READ_BYTES)
        out: list[Envelope] = []
        for envelope in chunk:
            if envelope.position > delivered:
                break  # committed but not folded yet: the next read has it
            out.append(envelope)
            self.after_seq = envelope.seq
        # a read cut by its bounds may have more behind it: then only what was read counts
        # as seen, so `wait` returns at once and the caller reads on
        cut = len(out) == len(chunk) and bool(out) and _maybe_cut(out)
        self._seen = out[-1].position if cut else delivered
        return out

    async def wait(self, timeout: float, *also: asyncio.Future[Any]) -> None:
        """Until something is committed after the last read, any of `also` (futures the
        caller owns, such as its stop signal) is done, or `timeout` passes."""
        commit = asyncio.ensure_future(self.store.wait_beyond(self._seen))
        try:
            await asyncio.wait(
                [commit, *also], timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            commit.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await commit


def _maybe_cut(chunk: list[Envelope]) -> bool:
    """Whether a bounded read may have stopped short. A record is its payload plus about a
    hundred bytes (position, digest, signature), so a read that reached READ_BYTES of records
    holds more than half that in payloads: never a miss, at worst one read more."""
    return len(chunk) >= READ_CHUNK or sum(len(e.payload) for e in chunk) >= READ_BYTES // 2
