"""Offline compaction: rewrite the journal's environment without free pages, in place.

A large commit (a bulk build, a mesh catch-up of many envelopes) frees as many pages as it
copies; LMDB reuses them in the commits that follow, and while it works through that free list
each commit writes about three times the bytes, in three times the calls, for about 200 commits
(bench/RESULTS.md, "Appends at depth, third look"). LMDB's compacting copy (`mdb_copy -c`)
leaves no free pages; this makes that copy next to the environment, fsyncs it and renames it
over `data.mdb`, so that at every instant, `kill -9` included, `data.mdb` is one complete
environment: the old one or the compacted one.

Only with nothing else using the environment: the writer lock refuses while a node (or another
writer) has it, and an LMDB lock probe refuses while any process has it open for reading.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import lmdb

from eventstore.durable import fsync_path
from eventstore.writer_lock import StoreAlreadyOpenError, WriterLock, claim_path, release_path

DATA_FILE, LOCK_FILE = "data.mdb", "lock.mdb"
WORK_DIR = "compacting"  # the copy under way; a leftover from an interrupted run is discarded
_MAX_DBS = 64

if TYPE_CHECKING:
    from lmdb import _StatDict


@dataclass(frozen=True)
class Compacted:
    """Sizes of `data.mdb` before and after, and the pages the old one did not use."""

    bytes_before: int
    bytes_after: int
    unused_pages_before: int


def compact(path: Path) -> Compacted:
    """Replace `path/data.mdb` with LMDB's compacting copy of it; see the module docstring."""
    path = Path(path)
    data_file = path / DATA_FILE
    if not data_file.is_file():
        raise FileNotFoundError(f"no journal at {path} ({DATA_FILE} missing)")
    claim = claim_path(path)
    lock = WriterLock(path)
    try:
        lock.acquire()
        _refuse_if_open(path / LOCK_FILE)
        work = path / WORK_DIR
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        before = data_file.stat().st_size
        # lock=False: LMDB's lock file stays untouched (nobody else has it open: probed above)
        env = lmdb.open(str(path), readonly=True, lock=False, max_dbs=_MAX_DBS)
        try:
            unused = _unused_pages(env)
            env.copy(str(work), compact=True)
            copied = work / DATA_FILE
            os.chmod(copied, stat.S_IMODE(data_file.stat().st_mode))  # who may read it stays
            fsync_path(copied)
        except BaseException:  # a full disk, say: the journal is untouched, drop the part copy
            shutil.rmtree(work, ignore_errors=True)
            raise
        finally:
            env.close()
        os.replace(copied, data_file)
        # its reader table and last transaction id describe the old file; the next process to
        # open the environment makes a new one
        (path / LOCK_FILE).unlink(missing_ok=True)
        fsync_path(path)  # the rename and the unlink are durable before we say done
        shutil.rmtree(work, ignore_errors=True)
        return Compacted(before, data_file.stat().st_size, unused)
    finally:
        lock.release()
        release_path(claim)


def _refuse_if_open(lock_file: Path) -> None:
    """Every process with the environment open holds a shared `fcntl` lock on the first byte
    of LMDB's lock file; an exclusive one is granted only when no process does."""
    if not lock_file.exists():
        return
    fd = os.open(lock_file, os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
    except OSError:
        raise StoreAlreadyOpenError(
            f"{lock_file.parent} is open in another process (a node, `audit verify`, "
            "`journal export`?): stop it first"
        ) from None
    finally:
        os.close(fd)  # releases the probe


def _unused_pages(env: lmdb.Environment) -> int:
    """Pages of the file that no database's tree holds: the free pages (and the few that
    hold the free list itself)."""
    used = env.info()["last_pgno"] + 1
    in_trees = _tree_pages(env.stat())  # the main database's, then every named one's
    with env.begin() as txn:
        for name, _ in txn.cursor():
            try:
                db = env.open_db(bytes(name), txn=txn, create=False)
            except lmdb.Error:
                continue
            in_trees += _tree_pages(txn.stat(db))
    return max(used - 2 - in_trees, 0)  # two meta pages


def _tree_pages(stat: _StatDict) -> int:
    return stat["branch_pages"] + stat["leaf_pages"] + stat["overflow_pages"]
