"""The Indexer protocol: read models folded inside the journal's write transactions, and the
catch-up that folds what they lack before the writer starts. The indexer here is a real one
(per-stream counts in its own LMDB database), small enough to see every promise."""

import asyncio
from collections import Counter

import msgspec

from eventstore.store import EventStore
from tests.eventstore.support import KEY

_POSITION = b"\0position"


class StreamCounts:
    """Events per stream, and the position folded, in the journal's environment."""

    def __init__(self, version: int = 1) -> None:
        self.version = version
        self.reported: list[int] = []  # envelopes in each committed fold
        self._staged = 0

    def attach(self, env, read):
        self.db = env.open_db(b"test.counts")
        self.read = read

    def prepare(self, txn):
        if txn.get(b"\0version", db=self.db) != str(self.version).encode():
            txn.drop(self.db, delete=False)  # a new version of its code: fold everything again
            txn.put(b"\0version", str(self.version).encode(), db=self.db)

    def position(self, txn):
        raw = txn.get(_POSITION, db=self.db)
        return int.from_bytes(raw, "big") if raw else 0

    def fold(self, txn, envelopes):
        done = self.position(txn)
        fresh = [e for e in envelopes if e.position > done]
        for e in fresh:
            key = e.stream.encode()
            raw = txn.get(key, db=self.db)
            txn.put(
                key,
                msgspec.msgpack.encode((msgspec.msgpack.decode(raw) if raw else 0) + 1),
                db=self.db,
            )
        if fresh:
            txn.put(_POSITION, fresh[-1].position.to_bytes(8, "big"), db=self.db)
        self._staged = len(fresh)

    def committed(self):
        self.reported.append(self._staged)
        self._staged = 0

    def counts(self) -> dict[str, int]:
        with self.read() as txn:
            return {
                k.decode(): msgspec.msgpack.decode(v)
                for k, v in txn.cursor(db=self.db)
                if not k.startswith(b"\0")
            }

    def folded(self) -> int:
        with self.read() as txn:
            return self.position(txn)


async def test_the_indexer_folds_each_commit_in_its_transaction(tmp_path):
    counts = StreamCounts()
    store = EventStore(tmp_path / "j", KEY, "node-a", indexer=counts)
    store.start()
    try:
        written = await asyncio.gather(*(store.append(f"s{i % 3}", "log", {}) for i in range(30)))
        assert counts.folded() == store.last_position == 30
        assert counts.counts() == Counter(e.stream for e in written)
        assert sum(counts.reported) == 30  # each envelope reported once, commit by commit
        assert store.catch_up_index() == 0  # the writer runs: nothing to catch up, ever
    finally:
        await store.close()


async def test_catch_up_folds_what_a_new_indexer_lacks_before_the_writer_starts(tmp_path):
    plain = EventStore(tmp_path / "j", KEY, "node-a")
    plain.start()
    await asyncio.gather(*(plain.append(f"s{i % 2}", "log", {}) for i in range(50)))
    await plain.close()

    counts = StreamCounts()
    store = EventStore(tmp_path / "j", KEY, "node-a", indexer=counts)
    totals: list[int] = []

    def progress(chunks, total):
        totals.append(total)
        yield from chunks

    assert store.catch_up_index(progress) == 50
    assert totals == [50]
    assert counts.counts() == {"s0": 25, "s1": 25} and counts.folded() == 50
    store.start()  # start's own catch-up finds nothing more
    try:
        await store.append("s0", "log", {})
        assert counts.counts() == {"s0": 26, "s1": 25}
    finally:
        await store.close()


async def test_an_indexer_whose_code_changed_is_emptied_and_folded_again(tmp_path):
    store = EventStore(tmp_path / "j", KEY, "node-a", indexer=StreamCounts(version=1))
    store.start()
    await asyncio.gather(*(store.append("a", "log", {}) for _ in range(10)))
    await store.close()

    again = StreamCounts(version=2)
    store = EventStore(tmp_path / "j", KEY, "node-a", indexer=again)
    assert store.catch_up_index() == 10  # prepare emptied it: all ten folded again
    assert again.counts() == {"a": 10}
    store.close_sync()

    same = StreamCounts(version=2)
    store = EventStore(tmp_path / "j", KEY, "node-a", indexer=same)
    assert store.catch_up_index() == 0 and same.counts() == {"a": 10}
    store.close_sync()


async def test_a_batch_retried_after_the_map_grew_is_folded_and_reported_once(tmp_path):
    counts = StreamCounts()
    store = EventStore(tmp_path / "j", KEY, "node-a", map_size=256 * 1024, indexer=counts)
    store.start()
    try:
        blob = "x" * 4000
        await asyncio.gather(*(store.append("a", "log", {"blob": blob}) for _ in range(300)))
        assert store.map_size > 256 * 1024  # it grew, so some batch was retried
        assert counts.counts() == {"a": 300}
        assert sum(counts.reported) == 300
    finally:
        await store.close()
