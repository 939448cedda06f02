"""Reads: by stream and seq, by position, chunked scans; batched decoding gives what reading
each row alone gives."""

import asyncio
import itertools
import threading

from eventstore.layout import decode_record
from eventstore.store import NewEvent


async def test_reading_in_chunks_gives_what_each_row_read_alone_gives(store):
    appended = [
        await store.append(f"s{i % 3}", ("log", "finding")[i % 2], {"i": i, "pad": "x" * i})
        for i in range(40)
    ]
    one_by_one = [store.get(e.stream, e.seq) for e in appended]
    assert one_by_one == appended
    assert store.read_all(0, 1000) == appended
    chunks = list(store.iter_chunks(after_position=5, size=7))
    assert [len(c) for c in chunks] == [7, 7, 7, 7, 7]
    assert list(itertools.chain.from_iterable(chunks)) == appended[5:]
    assert list(store.iter_chunks(after_position=40)) == []
    assert list(store.iter_chunks(size=40)) == [appended]  # an exact fit ends without a read


async def test_read_stream_pages_by_seq_and_stays_in_its_stream(store):
    # "a", "a-b" and "ab" share a first byte; the NUL after the name keeps them apart
    await store.append_many(
        [NewEvent(name, "log", {"i": i}) for i in range(5) for name in ("a", "a-b", "ab")]
    )
    assert [e.event.data["i"] for e in store.read_stream("a")] == [0, 1, 2, 3, 4]
    assert [e.seq for e in store.read_stream("a", after_seq=1, limit=2)] == [2, 3]
    assert [e.seq for e in store.read_stream("a", after_seq=5)] == []
    assert store.read_stream("nobody") == []
    assert [e.seq for e in store.iter_stream("a-b", chunk=2)] == [1, 2, 3, 4, 5]
    assert {e.stream for e in store.iter_stream("ab", chunk=3)} == {"ab"}


async def test_positions_heads_and_missing_rows(store):
    await store.append("a", "log", {})
    b = await store.append("b", "log", {})
    assert store.at(2) == b
    assert store.at(3) is None and store.at(0) is None
    assert store.get("b", 2) is None and store.get("nobody", 1) is None
    assert store.heads() == {"a": store.head("a"), "b": store.head("b")}
    assert store.head("b").digest == b.digest


async def test_stream_records_come_undecoded_for_audits(store):
    written = [await store.append("a", "log", {"i": i}) for i in range(5)]
    await store.append("a-other", "log", {})
    records = list(store.iter_stream_records("a", chunk=2))
    assert [seq for seq, _ in records] == [1, 2, 3, 4, 5]
    assert [decode_record(raw) for _, raw in records] == [
        (e.position, e.payload, e.digest, e.signature) for e in written
    ]


async def test_readers_on_other_threads_see_whole_commits_while_the_writer_writes(store):
    stop = threading.Event()
    seen: list[list[int]] = []

    def reader():
        while not stop.is_set():  # a reader's own scan, not a wait: it ends with the writes
            seqs = [e.seq for e in store.read_stream("a", 0, 10_000)]
            seen.append(seqs)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for _ in range(20):
            await store.append_many([NewEvent("a", "log", {}) for _ in range(5)])
    finally:
        stop.set()
        await asyncio.get_running_loop().run_in_executor(None, thread.join)
    assert seen
    for seqs in seen:  # never a gap, never half a request
        assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) % 5 == 0


async def test_bounded_reads_stop_at_the_byte_budget_and_always_make_progress(store):
    appended = [
        await store.append(f"s{i % 2}", "log", {"i": i, "pad": "x" * (1000 if i % 5 else 20_000)})
        for i in range(30)
    ]
    record = {e.position: len(e.payload) for e in appended}
    # the union of bounded reads is the plain read, in order; each read is within its budget
    # plus one record (it stops once it reaches it), and a record larger than the budget still
    # comes, alone
    for budget in (1, 5_000, 30_000):
        got, after = [], 0
        while chunk := store.read_all_bounded(after, 1000, budget):
            assert len(chunk) == 1 or sum(record[e.position] for e in chunk[:-1]) < budget
            got += chunk
            after = chunk[-1].position
        assert got == appended
        seqs, after_seq = [], 0
        while chunk := store.read_stream_bounded("s1", after_seq, 1000, budget):
            assert len(chunk) == 1 or sum(record[e.position] for e in chunk[:-1]) < budget
            seqs += chunk
            after_seq = chunk[-1].seq
        assert seqs == store.read_stream("s1", 0, 1000)
    assert len(store.read_all_bounded(0, 4, 10**9)) == 4  # the count limit still holds
    assert store.read_all_bounded(30, 10, 10) == []
    assert store.read_stream_bounded("nobody", 0, 10, 10) == []
