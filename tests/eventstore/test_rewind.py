"""Rewind: a journal's envelopes after a seq removed with every index entry naming them, the
indexer refolded, in one transaction, in the writer's order, the listeners told."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import lmdb
import pytest

from eventstore.envelope import Envelope
from eventstore.indexing import ReadTxn
from eventstore.store import EventStore
from tests.eventstore.support import KEY


class Positions:
    """A real indexer: the positions it folded, in a database of the journal's environment."""

    def attach(self, env: lmdb.Environment, read: ReadTxn) -> None:
        self.env, self.read = env, read
        self.db = env.open_db(b"rm.positions")

    def prepare(self, txn: lmdb.Transaction[bytes]) -> None:
        pass

    def reset(self, txn: lmdb.Transaction[bytes]) -> None:
        txn.drop(self.db, delete=False)

    def position(self, txn: lmdb.Transaction[bytes]) -> int:
        cursor = txn.cursor(db=self.db)
        return int.from_bytes(cursor.key(), "big") if cursor.last() else 0

    def fold(self, txn: lmdb.Transaction[bytes], envelopes: Sequence[Envelope]) -> None:
        done = self.position(txn)
        for e in envelopes:
            if e.position > done:
                txn.put(e.position.to_bytes(8, "big"), e.stream.encode(), db=self.db)

    def committed(self) -> None:
        pass

    def folded(self) -> list[int]:
        with self.read() as txn:
            return [int.from_bytes(k, "big") for k, _ in txn.cursor(db=self.db)]


@pytest.fixture
async def indexed(tmp_path):
    indexer = Positions()
    store = EventStore(tmp_path / "journal", KEY, "node-a", indexer=indexer)
    store.start()
    yield store, indexer
    await store.close()


async def fill(store: EventStore) -> None:
    for n in range(3):  # a1 b1 a2 b2 a3 b3 a4
        await store.append("a", "log", {"n": n})
        await store.append("b", "log", {"n": n})
    await store.append("a", "log", {"n": 3})


async def test_rewind_removes_the_later_envelopes_and_their_index_entries(indexed):
    store, indexer = indexed
    await fill(store)
    told: list[tuple[str, list[int]]] = []
    store.add_rewind_listener(
        lambda stream, removed: told.append((stream, [e.seq for e in removed]))
    )
    removed = await store.rewind("a", 2)
    assert [(e.stream, e.seq, e.position) for e in removed] == [("a", 3, 5), ("a", 4, 7)]
    assert told == [("a", [3, 4])]
    assert [e.seq for e in store.read_stream("a")] == [1, 2]
    assert [e.position for e in store.read_all()] == [1, 2, 3, 4, 6]
    assert store.head("a").seq == 2 and store.head("b").seq == 3
    assert store.get("a", 3) is None and store.at(5) is None
    assert indexer.folded() == [1, 2, 3, 4, 6]  # refolded without what was removed
    assert store.rewound_at() == 7
    # the journal goes on from its new head, chained to it
    again = await store.append("a", "log", {"n": "again"})
    assert (again.seq, again.position) == (3, 8)
    assert again.event.prev == store.get("a", 2).payload_hash
    assert indexer.folded() == [1, 2, 3, 4, 6, 8]


async def test_rewind_to_zero_removes_the_journal_and_past_its_head_removes_nothing(indexed):
    store, indexer = indexed
    await fill(store)
    assert await store.rewind("b", 3) == [] and await store.rewind("nobody", 0) == []
    assert store.rewound_at() == 0  # nothing was removed: no checkpoint is invalidated
    assert [e.seq for e in await store.rewind("b", 0)] == [1, 2, 3]
    assert store.head("b") is None and store.read_stream("b") == []
    assert indexer.folded() == [1, 3, 5, 7]
    assert (await store.append("b", "log", {})).seq == 1
    with pytest.raises(ValueError):
        store.rewind("a", -1)


async def test_a_rewind_takes_its_place_in_the_writers_order(indexed):
    store, _ = indexed
    await fill(store)
    seen: list[str] = []
    store.add_commit_listener(
        lambda envelopes: seen.extend(f"{e.stream}{e.seq}" for e in envelopes)
    )
    store.add_rewind_listener(lambda stream, removed: seen.append(f"rewind {stream}"))
    before = store.append("a", "log", {})  # queued before the rewind: a5, then removed
    rewind = store.rewind("a", 4)
    after = store.append("a", "log", {})  # queued after: a5 again, on the rewound journal
    first, removed, second = await asyncio.gather(before, rewind, after)
    assert (first.seq, [e.seq for e in removed], second.seq) == (5, [5], 5)
    assert seen == ["a5", "rewind a", "a5"]
    assert store.get("a", 5) == second
