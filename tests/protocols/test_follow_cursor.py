"""The protocol streams' journal cursor: a cursor that fell behind catches up a bounded piece
at a time, and `wait` does not sleep while pieces remain."""

from __future__ import annotations

import asyncio

from eventstore.store import EventStore, NewEvent
from node.protocols.follow import READ_BYTES, JournalCursor
from tests.eventstore.support import KEY


async def test_a_cursor_behind_reads_bounded_pieces_and_does_not_wait_between_them(tmp_path):
    store = EventStore(tmp_path / "journal", KEY, "node-a")
    store.start()
    try:
        cursor = JournalCursor(store, "busy", 0)
        pad = "p" * 20_000
        appended = await store.append_many(
            [NewEvent("busy" if i % 3 else "other", "log", {"i": i, "m": pad}) for i in range(90)]
        )
        mine = [e for e in appended if e.stream == "busy"]
        got, pieces = [], 0
        while True:
            piece = cursor.read()
            if not piece:
                break
            assert sum(len(e.payload) for e in piece[:-1]) < READ_BYTES
            got += piece
            pieces += 1
            if len(got) < len(mine):  # more remains: `wait` returns at once, not at its timeout
                await asyncio.wait_for(cursor.wait(30), 1)
        assert got == mine and len(got) == 60
        assert pieces > 3  # 60 events of 20 KB: several pieces of at most READ_BYTES
        # caught up: `wait` sleeps until the next commit
        waiting = asyncio.ensure_future(cursor.wait(30))
        await asyncio.sleep(0.1)
        assert not waiting.done()
        await store.append("busy", "log", {"i": 90})
        await asyncio.wait_for(waiting, 5)
        assert [e.event.data["i"] for e in cursor.read()] == [90]
    finally:
        await store.close()
