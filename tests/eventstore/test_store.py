"""The facade: `EventStore` wires the parts together and keeps the API node/ and projections/
use (writes, reads, listeners, imports, lifecycle); each part has its own tests."""

import asyncio

from eventstore.store import EventStore, ForeignEnvelope, NewEvent
from tests.eventstore.support import KEY, PEER_KEY, foreign


async def test_one_store_end_to_end_across_a_restart(tmp_path):
    seen: list[int] = []
    s = EventStore(tmp_path / "j", KEY, "node-a", max_batch=16)
    s.add_commit_listener(lambda envelopes: seen.extend(e.position for e in envelopes))
    s.start()
    assert s.max_batch == 16 and s.origin == "node-a"
    written = await asyncio.gather(*(s.append("a", "log", {"i": i}) for i in range(20)))
    many = await s.append_many([NewEvent("b", "log", {}), NewEvent("a", "log", {})])
    blocking = await asyncio.get_running_loop().run_in_executor(
        None, s.append_blocking, "c", "log", {}
    )
    assert seen == list(range(1, 24)) and s.last_position == 23
    assert s.read_all(0, 100) == [*written, *many, blocking]
    await s.close()

    again = EventStore(tmp_path / "j", KEY, "node-a")
    again.start()
    assert again.last_position == 23  # what is stored counts as delivered
    waiter = asyncio.create_task(again.wait_beyond(23))
    peer = EventStore(tmp_path / "peer", PEER_KEY, "node-b")
    peer.start()
    pushed = [await peer.append("scout", "finding", {}) for _ in range(2)]
    await peer.close()
    results = await again.import_envelopes(
        [*foreign(pushed), ForeignEnvelope("scout", 9, b"", b"")],
        {"node-b": PEER_KEY.verify_key}.get,
    )
    assert [r.status for r in results] == ["accepted", "accepted", "malformed"]
    await asyncio.wait_for(waiter, 5)
    assert [e.position for e in again.iter_stream("scout")] == [24, 25]
    assert again.at(25) == results[1].envelope
    assert set(again.heads()) == {"a", "b", "c", "scout"}
    await again.close()
