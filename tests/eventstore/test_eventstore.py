"""The journal: durable group commit, no gaps, verified imports, growth, reopen."""

import asyncio
import itertools
import threading

import pytest
from nacl.signing import SigningKey

from eventstore.audit import verify_journals
from eventstore.envelope import decode_event, verify_signature
from eventstore.store import (
    EventStore,
    ForeignEnvelope,
    ImportStatus,
    NewEvent,
    StoreAlreadyOpenError,
    StoreClosedError,
)
from eventstore.zeros import ZEROS_AHEAD_MAX

KEY = SigningKey(b"\1" * 32)
PEER_KEY = SigningKey(b"\2" * 32)


@pytest.fixture
async def store(tmp_path):
    s = EventStore(tmp_path / "journal", KEY, "node-a")
    s.start()
    yield s
    await s.close()


def foreign(envelopes):
    return [ForeignEnvelope(e.stream, e.seq, e.payload, e.signature) for e in envelopes]


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


async def test_callers_resume_only_after_listeners_saw_the_commit(store):
    seen: list[int] = []
    store.add_commit_listener(lambda envelopes: seen.extend(e.position for e in envelopes))
    results = await asyncio.gather(*(store.append("a", "log", {}) for _ in range(20)))
    for envelope in results:
        assert envelope.position in seen
    assert store.last_position == 20


async def test_append_many_is_atomic_and_a_bad_request_fails_alone(store):
    good = store.append_many([NewEvent("a", "x", {"n": 1}), NewEvent("b", "x", {"n": 2})])
    bad = store.append_many([NewEvent("a", "x", {"n": 3}), NewEvent("a", "x", {"n": object()})])
    results = await asyncio.gather(good, bad, return_exceptions=True)
    assert [e.stream for e in results[0]] == ["a", "b"]
    assert isinstance(results[1], TypeError)
    assert store.head("a").seq == 1  # nothing of the failed request was written


async def test_invalid_stream_names_are_refused_before_queueing(store):
    for name in ["", "a\0b", "x" * 201]:
        with pytest.raises(ValueError):
            await store.append(name, "log", {})


async def test_wait_beyond_wakes_on_commit(store):
    waiter = asyncio.create_task(store.wait_beyond(0))
    await asyncio.sleep(0.01)
    assert not waiter.done()
    await store.append("a", "log", {})
    await asyncio.wait_for(waiter, 2)


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


async def test_one_writer_per_environment_per_process(store):
    with pytest.raises(StoreAlreadyOpenError):
        EventStore(store.path, KEY, "node-a")


async def test_map_grows_instead_of_failing(tmp_path):
    s = EventStore(tmp_path / "j", KEY, "node-a", map_size=256 * 1024)
    s.start()
    blob = "x" * 4000
    await asyncio.gather(*(s.append("a", "log", {"blob": blob, "i": i}) for i in range(400)))
    assert s.head("a").seq == 400
    assert s._env.info()["map_size"] > 256 * 1024
    assert len(s.read_stream("a", 0, 1000)) == 400
    await s.close()


async def test_commits_write_into_zeros_kept_ahead_of_the_last_page(tmp_path):
    # a commit that grows the file makes fdatasync flush its size too; the writer keeps
    # written zeros ahead of LMDB's last page so that commits never grow it themselves
    s = EventStore(tmp_path / "j", KEY, "node-a")
    s.start()
    data_file = tmp_path / "j" / "data.mdb"
    page_size = s._env.stat()["psize"]
    for i in range(400):  # about 8 MiB of journal, which ends with the most zeros ahead
        await s.append("a", "log", {"blob": "x" * 20_000, "i": i})
        used = (s._env.info()["last_pgno"] + 1) * page_size
        if i:  # zeros follow the first commit; every later one found them (a file grown by
            # LMDB ends exactly at its last page)
            assert data_file.stat().st_size > used
    await s.close()  # the writer thread has done all its work
    size = data_file.stat().st_size
    assert size - used >= ZEROS_AHEAD_MAX // 2
    with data_file.open("rb") as data:
        data.seek(used)
        assert data.read() == bytes(size - used)
    reopened = EventStore(tmp_path / "j", KEY, "node-a")
    report = verify_journals(reopened, {"node-a": KEY.verify_key}.get)
    assert report.failure is None and report.envelopes == 400
    reopened.close_sync()


async def test_import_accepts_a_peers_journal_in_order(store, tmp_path):
    peer = EventStore(tmp_path / "peer", PEER_KEY, "node-b")
    peer.start()
    for i in range(3):
        await peer.append("scout", "finding", {"i": i})
    envelopes = peer.read_stream("scout")
    await peer.close()
    keys = {"node-b": PEER_KEY.verify_key}.get
    results = await store.import_envelopes(foreign(envelopes), keys)
    assert [r.status for r in results] == [ImportStatus.ACCEPTED] * 3
    stored = store.read_stream("scout")
    assert [(e.seq, e.payload, e.signature) for e in stored] == [
        (e.seq, e.payload, e.signature) for e in envelopes
    ]
    assert all(r.envelope.position > 0 for r in results)

    again = await store.import_envelopes(foreign(envelopes[:1]), keys)
    assert again[0].status == ImportStatus.DUPLICATE


async def test_import_rejections_are_typed(store, tmp_path):
    peer = EventStore(tmp_path / "peer", PEER_KEY, "node-b")
    peer.start()
    for i in range(4):
        await peer.append("scout", "finding", {"i": i})
    e1, e2, e3, e4 = peer.read_stream("scout")
    await peer.close()
    keys = {"node-b": PEER_KEY.verify_key}.get
    forged = ForeignEnvelope("scout", 1, e1.payload, KEY.sign(b"x").signature)
    unknown = await store.import_envelopes(foreign([e1]), {}.get)
    results = await store.import_envelopes(
        [
            forged,
            ForeignEnvelope("scout", 1, b"\xc1not msgpack", e1.signature),
            *foreign([e1, e3]),  # accepted, then a gap
        ],
        keys,
    )
    assert unknown[0].status == ImportStatus.UNKNOWN_ORIGIN
    assert [r.status for r in results] == [
        ImportStatus.BAD_SIGNATURE,
        ImportStatus.MALFORMED,
        ImportStatus.ACCEPTED,
        ImportStatus.GAP,
    ]

    # The origin signs a different envelope 1: equivocation.
    other = EventStore(tmp_path / "fork", PEER_KEY, "node-b")
    other.start()
    fork1 = await other.append("scout", "finding", {"fork": True})
    fork2 = await other.append("scout", "finding", {"fork": True})
    await other.close()
    results = await store.import_envelopes(foreign([fork1, fork2, e2]), keys)
    assert [r.status for r in results] == [
        ImportStatus.EQUIVOCATION,
        ImportStatus.BROKEN_CHAIN,  # seq 2 of the fork does not follow our seq 1
        ImportStatus.ACCEPTED,
    ]
    assert store.head("scout").seq == 2
    del e4
