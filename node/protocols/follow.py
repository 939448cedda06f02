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
        """The folded envelopes after the cursor, oldest first; advances the cursor."""
        self._seen = delivered = self.store.last_position
        out: list[Envelope] = []
        while True:
            chunk = self.store.read_stream(self.stream, self.after_seq, READ_CHUNK)
            for envelope in chunk:
                if envelope.position > delivered:
                    return out  # committed but not folded yet: the next read has it
                out.append(envelope)
                self.after_seq = envelope.seq
            if len(chunk) < READ_CHUNK:
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
