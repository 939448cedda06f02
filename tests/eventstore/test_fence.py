"""Fences: appends to a fenced journal fail once its deadline passed, even ones queued or
being committed before it; other journals and imports go on; lifting the fence ends it."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

import lmdb
import pytest

from eventstore.envelope import Envelope
from eventstore.indexing import ReadTxn
from eventstore.store import EventStore, Fenced, NewEvent
from tests.eventstore.support import KEY, PEER_KEY, foreign


class HeldFold:
    """A real (if trivial) indexer whose fold waits while `hold` is set: the writer is then
    inside a commit's transaction, the way a stopped process would leave it."""

    def __init__(self) -> None:
        self.hold = threading.Event()
        self.entered = threading.Event()
        self.release = threading.Event()

    def attach(self, env: lmdb.Environment, read: ReadTxn) -> None:
        self.db = env.open_db(b"rm.held")

    def prepare(self, txn: lmdb.Transaction[bytes]) -> None:
        pass

    def reset(self, txn: lmdb.Transaction[bytes]) -> None:
        pass

    def position(self, txn: lmdb.Transaction[bytes]) -> int:
        raw = txn.get(b"p", db=self.db)
        return int(raw) if raw else 0

    def fold(self, txn: lmdb.Transaction[bytes], envelopes: Sequence[Envelope]) -> None:
        if self.hold.is_set():
            self.entered.set()
            self.release.wait(10)
        txn.put(b"p", str(envelopes[-1].position).encode(), db=self.db)

    def committed(self) -> None:
        pass


@pytest.fixture
async def held(tmp_path):
    indexer = HeldFold()
    store = EventStore(tmp_path / "journal", KEY, "node-a", indexer=indexer)
    store.start()
    yield store, indexer
    indexer.release.set()
    await store.close()


async def test_a_fence_refuses_after_its_deadline_and_lifts(store):
    await store.append("a", "log", {})
    store.fence("a", time.monotonic() + 60)
    assert (await store.append("a", "log", {})).seq == 2  # before its deadline: written
    store.fence("a", time.monotonic() - 1)
    with pytest.raises(Fenced):
        await store.append("a", "log", {})
    assert (await store.append("b", "log", {})).seq == 1  # other journals go on
    assert store.head("a").seq == 2
    store.fence("a", None)
    assert store.fence_of("a") is None
    assert (await store.append("a", "log", {})).seq == 3


async def test_block_refuses_every_append_until_a_fence_replaces_it(store):
    store.block("a")
    with pytest.raises(Fenced):
        await store.append("a", "log", {})
    with pytest.raises(Fenced):  # all or nothing: the other journal's event is not written
        await store.append_many([NewEvent("b", "log", {}), NewEvent("a", "log", {})])
    assert store.head("a") is None and store.head("b") is None
    store.fence("a", time.monotonic() + 60)
    assert (await store.append("a", "log", {})).seq == 1


async def test_an_append_queued_before_the_deadline_fails_after_it(held):
    store, indexer = held
    store.fence("a", time.monotonic() + 0.3)
    indexer.hold.set()
    busy = asyncio.ensure_future(store.append("x", "log", {}))  # the writer stalls on it
    await asyncio.get_running_loop().run_in_executor(None, indexer.entered.wait, 5)
    indexer.hold.clear()
    queued = store.append("a", "log", {})  # queued in time, behind the stalled commit
    other = store.append("y", "log", {})
    await asyncio.sleep(0.4)
    indexer.release.set()
    assert (await busy).seq == 1 and (await other).seq == 1
    with pytest.raises(Fenced):
        await queued
    assert store.head("a") is None


async def test_an_append_staged_before_the_deadline_does_not_commit_after_it(held):
    store, indexer = held
    store.fence("a", time.monotonic() + 0.3)
    indexer.hold.set()
    staged = asyncio.ensure_future(store.append("a", "log", {}))  # staged, then the fold stalls
    await asyncio.get_running_loop().run_in_executor(None, indexer.entered.wait, 5)
    indexer.hold.clear()
    await asyncio.sleep(0.4)
    indexer.release.set()
    with pytest.raises(Fenced):
        await staged
    assert store.head("a") is None and store.read_all() == []
    store.fence("a", None)
    assert (await store.append("a", "log", {})).seq == 1


async def test_imports_are_never_fenced(store, tmp_path):
    peer = EventStore(tmp_path / "peer", PEER_KEY, "node-b")
    peer.start()
    try:
        written = [await peer.append("a", "log", {"n": n}) for n in range(2)]
    finally:
        await peer.close()
    store.block("a")
    results = await store.import_envelopes(foreign(written), lambda origin: PEER_KEY.verify_key)
    assert [r.status.value for r in results] == ["accepted", "accepted"]
    assert store.head("a").seq == 2
