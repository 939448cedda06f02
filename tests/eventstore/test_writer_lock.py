"""One writer per environment: one store per path in a process, one writing process per path
(an flock the OS drops when the process dies); readers need neither."""

import os
import signal
import subprocess
import sys

import pytest

from eventstore.store import EventStore, StoreAlreadyOpenError
from eventstore.writer_lock import WriterLock
from tests.eventstore.support import KEY
from tests.support import ROOT

# a second process: `write` takes the writer lock (as `catch_up_index` does before any write),
# `read` only reads, `hold` takes the lock and keeps it until killed
CHILD = """
import sys
from nacl.signing import SigningKey
from eventstore.store import EventStore, StoreAlreadyOpenError

mode, path = sys.argv[1], sys.argv[2]
store = EventStore(path, SigningKey(bytes([1]) * 32), "node-a")
if mode == "read":
    print(len(store.read_all()), flush=True)
    sys.exit(0)
try:
    store.catch_up_index()
except StoreAlreadyOpenError as exc:
    print("refused:", exc, flush=True)
    sys.exit(3)
print("locked", flush=True)
if mode == "hold":
    sys.stdin.read()
"""


def child(mode: str, path, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, mode, str(path)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        **kwargs,
    )


async def test_one_writer_per_environment_per_process(store):
    with pytest.raises(StoreAlreadyOpenError, match="already open in this process"):
        EventStore(store.path, KEY, "node-a")


async def test_a_closed_store_frees_its_path_for_the_next_one(tmp_path):
    first = EventStore(tmp_path / "j", KEY, "node-a")
    first.start()
    await first.append("a", "log", {})
    await first.close()
    second = EventStore(tmp_path / "j", KEY, "node-a")
    second.start()
    assert (await second.append("a", "log", {})).seq == 2
    await second.close()


async def test_a_second_process_may_read_but_not_write(store):
    await store.append("a", "log", {})
    reader = child("read", store.path)
    out, _ = reader.communicate(timeout=60)
    assert reader.returncode == 0 and out.strip() == "1"  # LMDB readers next to the writer
    writer = child("write", store.path)
    out, _ = writer.communicate(timeout=60)
    assert writer.returncode == 3
    assert "is being written by another process" in out


def test_the_lock_dies_with_its_process_kill_9_included(tmp_path):
    tmp_path.joinpath("j").mkdir()
    holder = child("hold", tmp_path / "j")
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(StoreAlreadyOpenError, match="being written by another process"):
            WriterLock(tmp_path / "j").acquire()
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(30)
    lock = WriterLock(tmp_path / "j")
    lock.acquire()
    assert lock.held
    lock.acquire()  # taken once; a second call keeps it
    lock.release()
    assert not lock.held
