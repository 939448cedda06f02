"""After a commit: listeners see the envelopes in order before the callers resume; a listener
that raises is reported and harms nobody else."""

import asyncio
import logging

from eventstore.store import NewEvent


async def test_callers_resume_only_after_listeners_saw_the_commit(store):
    seen: list[int] = []
    store.add_commit_listener(lambda envelopes: seen.extend(e.position for e in envelopes))
    results = await asyncio.gather(*(store.append("a", "log", {}) for _ in range(20)))
    for envelope in results:
        assert envelope.position in seen
    assert seen == list(range(1, 21))  # every envelope once, in position order
    assert store.last_position == 20


async def test_listeners_run_on_the_loop_in_the_order_they_were_added(store):
    calls: list[tuple[str, object]] = []
    loop = asyncio.get_running_loop()

    def first(envelopes):
        calls.append(("first", asyncio.get_running_loop() is loop))

    store.add_commit_listener(first)
    store.add_commit_listener(lambda envelopes: calls.append(("second", len(envelopes))))
    await store.append_many([NewEvent("a", "log", {}), NewEvent("b", "log", {})])
    assert calls == [("first", True), ("second", 2)]


async def test_a_listener_that_raises_is_reported_and_the_rest_still_run(store):
    faults = []
    after: list[int] = []

    def broken(envelopes):
        raise RuntimeError("boom")

    store.add_commit_listener(broken)
    store.add_commit_listener(lambda envelopes: after.extend(e.position for e in envelopes))
    store.on_listener_fault = lambda listener, envelopes, exc: faults.append(
        (listener, [e.position for e in envelopes], str(exc))
    )
    written = await store.append("a", "log", {})  # the caller resumes: its write is durable
    assert written.position == 1 and after == [1]
    assert faults == [(broken, [1], "boom")]
    assert store.last_position == 1


async def test_a_fault_hook_that_raises_leaves_the_log_line(store, caplog):
    def broken(envelopes):
        raise RuntimeError("boom")

    def broken_hook(listener, envelopes, exc):
        raise ValueError("the reporter failed too")

    store.add_commit_listener(broken)
    store.on_listener_fault = broken_hook
    with caplog.at_level(logging.ERROR, logger="agent-node.eventstore"):
        written = await store.append("a", "log", {})
    assert written.seq == 1
    assert any("raised on a batch from a#1" in r.getMessage() for r in caplog.records)


async def test_wait_beyond_wakes_on_commit(store):
    waiter = asyncio.create_task(store.wait_beyond(0))
    await asyncio.sleep(0.01)
    assert not waiter.done()
    await store.append("a", "log", {})
    await asyncio.wait_for(waiter, 2)
    await asyncio.wait_for(store.wait_beyond(0), 2)  # already beyond: returns at once
