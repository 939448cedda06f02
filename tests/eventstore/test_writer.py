"""The writer: group commit, seq and chain per stream, no gaps, atomic requests, signatures."""

import asyncio
import itertools
import threading
from collections import Counter

import pytest

from eventstore.envelope import decode_event, verify_signature
from eventstore.store import EventStore, NewEvent, StoreClosedError
from tests.eventstore.support import KEY


async def test_append_signs_chains_and_numbers(store):
    first = await store.append("payer", "log", {"level": "info", "message": "a"})
    second = await store.append("payer", "log", {"level": "info", "message": "b"})
    other = await store.append("worker", "log", {"level": "info", "message": "c"})
    assert (first.seq, second.seq, other.seq) == (1, 2, 1)
    assert (first.position, second.position, other.position) == (1, 2, 3)
    assert first.event.prev == "" and second.event.prev == first.payload_hash
    assert second.event.origin == "node-a"
    assert verify_signature(KEY.verify_key, "payer", 2, second.digest, second.signature)
    assert decode_event(second.payload) == second.event
    assert store.read_stream("payer") == [first, second]
    assert [e.position for e in store.read_all()] == [1, 2, 3]
    assert store.head("payer").seq == 2 and store.head("nobody") is None


async def test_concurrent_appends_from_coroutines_and_threads_never_gap(store):
    async def producer(n: int):
        for i in range(50):
            await store.append(f"s{n % 4}", "log", {"i": i})

    def thread_producer(n: int):
        for i in range(50):
            store.append_blocking(f"s{n % 4}", "log", {"i": i, "t": n})

    threads = [threading.Thread(target=thread_producer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    await asyncio.gather(*(producer(n) for n in range(32)))
    await asyncio.get_running_loop().run_in_executor(None, lambda: [t.join() for t in threads])
    everything = store.read_all(0, 10_000)
    assert [e.position for e in everything] == list(range(1, 36 * 50 + 1))
    for n in range(4):
        journal = store.read_stream(f"s{n}", 0, 10_000)
        assert [e.seq for e in journal] == list(range(1, len(journal) + 1))
        for before, after in itertools.pairwise(journal):
            assert after.event.prev == before.payload_hash
    # batches this size are signed on two threads: every signature must still be right
    assert all(
        verify_signature(KEY.verify_key, e.stream, e.seq, e.digest, e.signature) for e in everything
    )


async def test_waiting_appends_commit_together_sharing_one_ts_and_at_most_max_batch(tmp_path):
    store = EventStore(tmp_path / "j", KEY, "node-a", max_batch=8)
    store.start()
    try:
        envelopes = await asyncio.gather(*(store.append("a", "log", {"i": i}) for i in range(40)))
    finally:
        await store.close()
    commits = Counter(e.event.ts for e in envelopes)  # one commit, one instant
    assert sum(commits.values()) == 40
    assert max(commits.values()) <= 8  # max_batch requests a transaction
    assert len(commits) < 40  # the appends queued while one committed went together
    # a commit's envelopes are consecutive in the total order
    for ts in commits:
        positions = [e.position for e in envelopes if e.event.ts == ts]
        assert positions == list(range(positions[0], positions[0] + len(positions)))


async def test_append_many_is_atomic_and_a_bad_request_fails_alone(store):
    good = store.append_many([NewEvent("a", "x", {"n": 1}), NewEvent("b", "x", {"n": 2})])
    bad = store.append_many([NewEvent("a", "x", {"n": 3}), NewEvent("a", "x", {"n": object()})])
    results = await asyncio.gather(good, bad, return_exceptions=True)
    assert [e.stream for e in results[0]] == ["a", "b"]
    assert isinstance(results[1], TypeError)
    assert store.head("a").seq == 1  # nothing of the failed request was written
    assert [e.position for e in store.read_all()] == [1, 2]  # and it took no position


async def test_append_many_chains_several_events_of_one_stream(store):
    written = await store.append_many([NewEvent("a", "x", {"n": n}) for n in range(3)])
    assert [e.seq for e in written] == [1, 2, 3]
    assert written[1].event.prev == written[0].payload_hash
    assert written[2].event.prev == written[1].payload_hash
    assert store.head("a").digest == written[2].digest


async def test_invalid_stream_names_are_refused_before_queueing(store):
    for name in ["", "a\0b", "x" * 201]:
        with pytest.raises(ValueError):
            await store.append(name, "log", {})
    with pytest.raises(ValueError):
        await store.append_many([NewEvent("ok", "log", {}), NewEvent("", "log", {})])
    assert store.read_all() == []


async def test_close_commits_everything_already_queued(tmp_path):
    store = EventStore(tmp_path / "j", KEY, "node-a")
    store.start()
    pending = [store.append("a", "log", {"i": i}) for i in range(200)]
    await store.close()
    written = await asyncio.gather(*pending)
    assert [e.seq for e in written] == list(range(1, 201))
    with pytest.raises(StoreClosedError):
        await store.append("a", "log", {})
    reopened = EventStore(tmp_path / "j", KEY, "node-a")
    assert reopened.head("a").seq == 200
    reopened.close_sync()


async def test_reopen_keeps_everything_and_continues_the_chain(tmp_path):
    s = EventStore(tmp_path / "j", KEY, "node-a")
    s.start()
    last = None
    for i in range(5):
        last = await s.append("a", "log", {"i": i})
    await s.close()
    s = EventStore(tmp_path / "j", KEY, "node-a")
    s.start()
    nxt = await s.append("a", "log", {"i": 5})
    assert (nxt.seq, nxt.position, nxt.event.prev) == (6, 6, last.payload_hash)
    await s.close()
    with pytest.raises(StoreClosedError):
        await s.append("a", "log", {})


async def test_a_store_that_was_never_started_refuses_writes(tmp_path):
    s = EventStore(tmp_path / "j", KEY, "node-a")
    with pytest.raises(StoreClosedError):
        s.append_blocking("a", "log", {})
    s.close_sync()
