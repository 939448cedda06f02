"""Resumption by Last-Event-ID while events keep coming: nothing lost, nothing twice, in order."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from eventstore.store import NewEvent
from node.context import CONTEXT
from node.streams.replay import first_seq_after
from tests.support import SseStream, make_config


@pytest.fixture
def config(tmp_path):
    config = make_config(tmp_path)
    config.node.sse_keepalive_secs = 0.5
    return config


def url(client) -> str:
    return str(client.make_url("/"))


async def produce(ctx, count: int, agents: tuple[str, ...] = ("payer", "other")) -> list[int]:
    """Append `count` events, one commit at a time with a breath between, like live traffic."""
    positions = []
    for i in range(count):
        envelope = await ctx.store.append(
            agents[i % len(agents)], "log", {"level": "info", "message": f"m{i}"}
        )
        positions.append(envelope.position)
        if i % 5 == 0:
            await asyncio.sleep(0.002)
    return positions


async def read_ids(stream: SseStream, count: int) -> list[int]:
    return [int((await stream.next()).id) for _ in range(count)]


async def read_until(stream: SseStream, last: int, timeout: float = 10) -> list[int]:
    ids: list[int] = []
    while not ids or ids[-1] < last:
        ids.append(int((await stream.next(timeout)).id))
    return ids


async def test_resume_across_disconnects_while_events_keep_coming(client):
    ctx = client.app[CONTEXT]
    base = url(client)
    async with SseStream(base, "/api/v1/events") as first:
        producer = asyncio.create_task(produce(ctx, 600))
        got = await read_ids(first, 40)
    await asyncio.sleep(0.05)  # disconnected while the producer goes on
    # resume by header
    async with SseStream(base, "/api/v1/events", **{"Last-Event-ID": str(got[-1])}) as second:
        got += await read_ids(second, 150)
    await asyncio.sleep(0.05)
    # resume by query parameter
    async with SseStream(base, f"/api/v1/events?last_event_id={got[-1]}") as third:
        got += await read_ids(third, 100)
    # a browser reconnects to its original URL with a newer Last-Event-ID: the header wins
    async with SseStream(
        base, "/api/v1/events?last_event_id=1", **{"Last-Event-ID": str(got[-1])}
    ) as fourth:
        positions = await producer
        got += await read_until(fourth, positions[-1])
    assert got == positions  # every event once, in order, across four connections


async def test_resume_of_a_large_backlog_then_live_tail(client):
    ctx = client.app[CONTEXT]
    await ctx.store.append_many(
        [NewEvent("payer", "log", {"level": "info", "message": str(i)}) for i in range(2500)]
    )
    async with SseStream(url(client), "/api/v1/events?last_event_id=0") as stream:
        producer = asyncio.create_task(produce(ctx, 100))
        positions = await producer
        got = await read_until(stream, positions[-1])
    assert got == list(range(1, positions[-1] + 1))


async def test_per_agent_resume_reads_only_that_journal(client):
    ctx = client.app[CONTEXT]
    mine = []
    for i in range(30):
        await ctx.store.append("other", "log", {"level": "info", "message": "x"})
        mine.append(await ctx.store.append("payer", "log", {"level": "info", "message": i}))
    after = mine[9].position
    path = f"/api/v1/agents/stream?agent=payer&last_event_id={after}"
    async with SseStream(url(client), path) as stream:
        live = await ctx.store.append("payer", "log", {"level": "info", "message": "live"})
        await ctx.store.append("other", "log", {"level": "info", "message": "x"})
        got = await read_until(stream, live.position)
    assert got == [e.position for e in mine[10:]] + [live.position]
    assert first_seq_after(ctx.store, "payer", 0) == 1
    assert first_seq_after(ctx.store, "payer", after) == 11
    assert first_seq_after(ctx.store, "payer", live.position) is None
    assert first_seq_after(ctx.store, "nobody", 0) is None


async def test_a2a_stream_resumes_task_events_only(client):
    ctx = client.app[CONTEXT]
    created = await ctx.store.append(
        "worker", "task.created", {"id": "t1", "from": "a", "to": "worker", "input": {}}
    )
    await ctx.store.append("worker", "log", {"level": "info", "message": "noise"})
    started = await ctx.store.append("worker", "task.started", {"id": "t1"})
    path = f"/api/v1/a2a/events?last_event_id={created.position - 1}"
    async with SseStream(url(client), path) as stream:
        done = await ctx.store.append("worker", "task.completed", {"id": "t1", "output": {}})
        events = await stream.take(3)
    assert [(e.event, int(e.id)) for e in events] == [
        ("task_created", created.position),
        ("task_started", started.position),
        ("task_completed", done.position),
    ]


async def test_resuming_at_the_head_sends_only_new_events(client):
    ctx = client.app[CONTEXT]
    head = (await ctx.store.append("payer", "log", {"level": "info", "message": "old"})).position
    async with SseStream(url(client), "/api/v1/events", **{"Last-Event-ID": str(head)}) as stream:
        new = await ctx.store.append("payer", "log", {"level": "info", "message": "new"})
        event = await stream.next()
        with contextlib.suppress(TimeoutError):
            extra = await stream.next(0.3)
            raise AssertionError(f"unexpected {extra}")
    assert int(event.id) == new.position
