"""Zeros kept written ahead of LMDB's last page, so commits never grow the data file."""

import lmdb

from eventstore.audit import verify_journals
from eventstore.store import EventStore
from eventstore.zeros import ZEROS_AHEAD_MAX, ZEROS_AHEAD_MIN, ZerosAhead
from tests.eventstore.support import KEY


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


def test_a_small_environment_gets_the_minimum_once_then_nothing_until_half_is_used(tmp_path):
    env = lmdb.open(str(tmp_path), map_size=64 << 20)
    try:
        zeros = ZerosAhead(env, tmp_path / "data.mdb")
        with env.begin(write=True) as txn:
            txn.put(b"k", b"v")
        zeros.keep()
        size = (tmp_path / "data.mdb").stat().st_size
        assert size == zeros.used() + ZEROS_AHEAD_MIN
        with env.begin(write=True) as txn:  # a few more pages: far less than half of the zeros
            for i in range(20):
                txn.put(i.to_bytes(4, "big"), bytes(1000))
        zeros.keep()
        assert (tmp_path / "data.mdb").stat().st_size == size
        with (tmp_path / "data.mdb").open("rb") as data:  # LMDB wrote its pages into them
            data.seek(zeros.used())
            assert data.read() == bytes(size - zeros.used())
    finally:
        env.close()


def test_zeros_never_pass_the_map_size(tmp_path):
    env = lmdb.open(str(tmp_path), map_size=256 * 1024)
    try:
        zeros = ZerosAhead(env, tmp_path / "data.mdb")
        with env.begin(write=True) as txn:
            txn.put(b"k", b"v")
        zeros.keep()
        assert (tmp_path / "data.mdb").stat().st_size == 256 * 1024
        zeros.keep()  # at the map's end: nothing more to write before it grows
        assert (tmp_path / "data.mdb").stat().st_size == 256 * 1024
    finally:
        env.close()
