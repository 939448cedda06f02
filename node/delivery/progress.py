"""Journaling which deliveries ended, so the next home of a journal sends only the rest.

Every second, the ids of the entries that ended (delivered, given up, dropped) since the last
time go into each journal this node is home of, as one `delivery.progress` (at most
MAX_DELIVERY_MARKS ids each). Between two of these, a node that dies has delivered what its
successor does not know of: that is sent again (at least once). A journal this node is no
longer home of gets no marks: its new home writes its own.
"""

from __future__ import annotations

import asyncio
import logging

from node.context import NodeContext
from node.delivery import book as b
from node.delivery import store as s
from node.delivery.waits import next_turn
from projections import catalogue as c
from projections.journals import Journals

log = logging.getLogger(__name__)
INTERVAL_SECS = 1.0


class ProgressWriter:
    def __init__(self, ctx: NodeContext, book: b.Book, writer: s.Writer) -> None:
        self.ctx = ctx
        self.book = book
        self.writer = writer
        self.journals = ctx.projections.get(Journals)

    async def run(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            try:
                await self.flush()
            except Exception:
                log.exception("could not journal the outbox's progress; retrying")
            await next_turn(stopping, INTERVAL_SECS)

    async def flush(self) -> int:
        """Journal what ended; returns how many ids were written."""
        written = 0
        for journal, ids in list(self.book.done.items()):
            if not ids:
                del self.book.done[journal]
                continue
            batch = ids[: c.MAX_DELIVERY_MARKS]
            if self.journals.home_of(journal) in (None, self.ctx.name):
                event = c.event_of(c.DeliveryProgress(done=batch))
                try:
                    await self.ctx.store.append(journal, *event)
                except Exception as exc:  # fenced (a placed agent that lost its lease), closed
                    log.info("progress of %s not journaled: %s", journal, type(exc).__name__)
                    continue
                written += len(batch)
            del ids[: len(batch)]
            await self.writer.submit([s.delete_done(journal, i) for i in batch])
        return written
