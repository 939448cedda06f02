"""Map growth: a full map doubles and the write is retried; growing waits for open readers and
holds new ones back until it is done."""

import asyncio
import threading

import lmdb

from eventstore.growth import MapGate
from eventstore.store import EventStore
from tests.eventstore.support import KEY
from tests.polling import wait_until


async def test_map_grows_instead_of_failing(tmp_path):
    s = EventStore(tmp_path / "j", KEY, "node-a", map_size=256 * 1024)
    s.start()
    blob = "x" * 4000
    await asyncio.gather(*(s.append("a", "log", {"blob": blob, "i": i}) for i in range(400)))
    assert s.head("a").seq == 400
    assert s.map_size > 256 * 1024
    assert len(s.read_stream("a", 0, 1000)) == 400
    await s.close()


def test_write_growing_retries_a_full_map_until_the_write_fits(tmp_path):
    env = lmdb.open(str(tmp_path), map_size=64 * 1024)
    try:
        gate = MapGate(env)
        attempts: list[int] = []

        def write(txn):
            attempts.append(gate.map_size)
            for i in range(64):
                txn.put(i.to_bytes(4, "big"), bytes(16 * 1024))

        gate.write_growing(write)
        assert len(attempts) > 1 and attempts == sorted(attempts)  # doubled between attempts
        assert gate.map_size >= 1024 * 1024
        with gate.read() as txn:
            assert txn.stat()["entries"] == 64
    finally:
        env.close()


def test_growth_waits_for_open_readers_and_holds_new_ones_back(tmp_path):
    env = lmdb.open(str(tmp_path), map_size=1 << 20)
    try:
        gate = MapGate(env)
        reading, release, grown = threading.Event(), threading.Event(), threading.Event()
        seen_by_late_reader: list[int] = []

        def open_reader():
            with gate.read():
                reading.set()
                release.wait(10)

        def grow():
            gate.grow()
            grown.set()

        def late_reader():
            with gate.read():
                seen_by_late_reader.append(gate.map_size)

        reader = threading.Thread(target=open_reader)
        reader.start()
        assert reading.wait(10)
        grower = threading.Thread(target=grow)
        grower.start()
        wait_until(lambda: gate._resizing, 10, "the growth waiting for the open reader")
        assert not grown.wait(0.2)  # a reader is open: growing must not resize under it
        late = threading.Thread(target=late_reader)
        late.start()
        late.join(0.3)
        assert late.is_alive() and not seen_by_late_reader  # held back while growth waits
        release.set()
        for thread in (reader, grower, late):
            thread.join(10)
        assert grown.is_set() and gate.map_size == 2 << 20
        assert seen_by_late_reader == [2 << 20]  # it read only after the growth
    finally:
        env.close()
