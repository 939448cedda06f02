"""Offline compaction (`agent-node journal compact`): the journal comes back whole, without the
free pages a large commit leaves, and compaction refuses while anything has the journal open;
killed at any instant, the journal is the old one or the compacted one."""

import os
import signal
import subprocess
import sys

import lmdb
import pytest

from eventstore.audit import verify_journals
from eventstore.compaction import WORK_DIR, compact
from eventstore.store import EventStore, NewEvent, StoreAlreadyOpenError
from node.ops.polling import wait_until
from tests.eventstore.support import KEY
from tests.support import ROOT


def free_pages(path) -> int:
    """Pages on LMDB's free list, from `mdb_stat`'s own count of the free list's records."""
    env = lmdb.open(str(path), readonly=True, lock=False, max_dbs=8)
    try:
        used = env.info()["last_pgno"] + 1
        in_trees = 0
        with env.begin() as txn:
            stats = [env.stat()]
            for name, _ in txn.cursor():
                stats.append(txn.stat(env.open_db(bytes(name), txn=txn, create=False)))
        for s in stats:
            in_trees += s["branch_pages"] + s["leaf_pages"] + s["overflow_pages"]
        return used - 2 - in_trees
    finally:
        env.close()


async def bulk_journal(path, events: int = 6000) -> list[bytes]:
    """A journal written as a bulk build writes it: large batches over many streams."""
    store = EventStore(path, KEY, "node-a")
    store.start()
    pad = "x" * 200
    batch = [NewEvent(f"agent-{i % 40:02d}", "log", {"n": i, "pad": pad}) for i in range(2000)]
    for _ in range(events // len(batch)):
        await store.append_many(batch)
    payloads = [e.payload for e in store.read_all(limit=100_000)]
    await store.close()
    return payloads


async def test_compaction_keeps_every_envelope_and_drops_the_free_pages(tmp_path):
    path = tmp_path / "journal"
    payloads = await bulk_journal(path)
    assert free_pages(path) > 100  # what the last large commits freed

    done = compact(path)

    assert free_pages(path) == 0
    assert done.unused_pages_before > 100 and done.bytes_after < done.bytes_before
    assert not (path / WORK_DIR).exists()
    store = EventStore(path, KEY, "node-a")
    store.start()
    try:
        assert [e.payload for e in store.read_all(limit=100_000)] == payloads
        appended = await store.append("agent-07", "log", {"after": "compaction"})
        assert appended.seq == 6000 // 40 + 1 and appended.position == 6001
        report = verify_journals(store, {"node-a": KEY.verify_key}.get)
        assert report.failure is None and report.envelopes == 6001, report
    finally:
        await store.close()


async def test_compaction_refuses_while_a_store_has_the_journal(tmp_path):
    path = tmp_path / "journal"
    await bulk_journal(path, 2000)
    store = EventStore(path, KEY, "node-a")
    store.start()
    try:
        with pytest.raises(StoreAlreadyOpenError):
            compact(path)
    finally:
        await store.close()


# another process with the journal open for reading only (as `audit verify` next to a node)
READER = """
import sys, lmdb
env = lmdb.open(sys.argv[1], readonly=True, max_dbs=8)
print("open", flush=True)
sys.stdin.read()
"""


async def test_compaction_refuses_while_another_process_reads_the_journal(tmp_path):
    path = tmp_path / "journal"
    await bulk_journal(path, 2000)
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdout.readline().strip() == "open"
        with pytest.raises(StoreAlreadyOpenError, match="open in another process"):
            compact(path)
    finally:
        reader.kill()
        reader.wait(30)
    assert compact(path).unused_pages_before > 0  # once it is gone


COMPACTOR = """
import sys
from pathlib import Path
from eventstore.compaction import compact
print("start", flush=True)
while True:
    compact(Path(sys.argv[1]))
"""


async def test_kill_9_during_compaction_leaves_a_whole_journal(tmp_path):
    path = tmp_path / "journal"
    payloads = await bulk_journal(path)
    compactor = subprocess.Popen(
        [sys.executable, "-c", COMPACTOR, str(path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert compactor.stdout.readline().strip() == "start"
        # compacting over and over: kill it once a copy is under way (or between two)
        wait_until(lambda: (path / WORK_DIR).exists(), timeout=30, interval=0.001)
    finally:
        os.kill(compactor.pid, signal.SIGKILL)
        compactor.wait(30)
    store = EventStore(path, KEY, "node-a")
    store.start()
    try:
        assert [e.payload for e in store.read_all(limit=100_000)] == payloads
        assert (await store.append("agent-00", "log", {})).position == len(payloads) + 1
    finally:
        await store.close()
    compact(path)  # the leftover copy under way is discarded
    assert not (path / WORK_DIR).exists()
