"""The unified and per-agent SSE streams over real HTTP: ids, order, names, filters, keep-alive."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time

import pytest

from eventstore.store import NewEvent
from node.context import CONTEXT
from node.streams.bus import BUS
from tests.polling import until
from tests.support import READ_TOKEN, SseStream, make_config


@pytest.fixture
def config(tmp_path):
    config = make_config(tmp_path)
    config.node.sse_keepalive_secs = 0.3
    return config


def url(client) -> str:
    return str(client.make_url("/"))


async def test_journaled_events_carry_their_position_in_order(client):
    ctx = client.app[CONTEXT]
    async with SseStream(url(client), "/api/v1/events", READ_TOKEN) as stream:
        assert stream.response.status_code == 200
        assert stream.response.headers["content-type"].startswith("text/event-stream")
        envelopes = []
        for i in range(30):
            envelopes += await ctx.store.append_many(
                [NewEvent(f"agent-{i % 3}", "log", {"level": "info", "message": f"m{i}"})]
            )
        events = await stream.take(30)
    assert [int(e.id) for e in events] == [e.position for e in envelopes]
    assert [e.event for e in events] == ["log"] * 30
    first = events[0].json()
    assert first["agent"] == "agent-0" and first["message"] == "m0" and first["level"] == "info"
    assert first["origin"] == "node-a" and first["ts"].endswith("Z")


async def test_event_names_for_journal_types(client):
    ctx = client.app[CONTEXT]
    async with SseStream(url(client), "/api/v1/events") as stream:
        await ctx.store.append("payer", "agent.errored", {"kind": "trap", "error": "boom"})
        await ctx.store.append("payer", "approval.requested", {"id": "a1", "capability": "spend"})
        await ctx.store.append("payer", "finding", {"severity": "high", "title": "t"})
        events = await stream.take(3)
    assert [e.event for e in events] == ["error", "approval_requested", "finding"]
    assert events[0].json()["agent"] == "payer"
    assert events[0].json()["error"] == "boom"


async def test_runtime_events_published_on_the_loop_and_from_threads(client):
    bus = client.app[BUS]
    async with SseStream(url(client), "/api/v1/events") as stream:
        bus.publish("token", {"agent": "payer", "text": "he"})
        bus.publish("tool_call_start", {"tool": "http_fetch", "args": {"u": 1}}, agent="payer")
        worker = threading.Thread(
            target=bus.publish_threadsafe,
            args=("agent_complete", {"agent": "payer", "duration_ms": 3}),
        )
        worker.start()
        worker.join()
        events = await stream.take(3)
    assert [(e.event, e.id) for e in events] == [
        ("token", ""),
        ("tool_call_start", ""),
        ("agent_complete", ""),
    ]
    assert events[0].json() == {"agent": "payer", "text": "he"}
    assert events[1].json() == {"agent": "payer", "tool": "http_fetch", "args": {"u": 1}}


async def test_per_agent_stream_filters_and_validates(client):
    ctx = client.app[CONTEXT]
    bus = client.app[BUS]
    missing = await client.get("/api/v1/agents/stream", headers={"Authorization": "Bearer x"})
    assert missing.status == 401
    from tests.support import auth

    missing = await client.get("/api/v1/agents/stream", headers=auth())
    assert missing.status == 400
    assert missing.content_type == "application/problem+json"
    unknown = await client.get("/api/v1/agents/stream?agent=nobody", headers=auth())
    assert unknown.status == 404
    await ctx.store.append("payer", "log", {"level": "info", "message": "hello"})  # now known
    async with SseStream(url(client), "/api/v1/agents/stream?agent=payer") as stream:
        await ctx.store.append("other", "log", {"level": "info", "message": "not mine"})
        bus.publish("token", {"agent": "other", "text": "x"})
        bus.publish("token", {"agent": "payer", "text": "y"})
        mine = await ctx.store.append("payer", "log", {"level": "info", "message": "mine"})
        events = await stream.take(2)
        with pytest.raises(TimeoutError):
            await stream.next(0.4)
    assert [e.event for e in events] == ["token", "log"]
    assert events[0].json()["text"] == "y"
    assert int(events[1].id) == mine.position


async def test_keepalive_comes_at_the_configured_interval(client):
    async with SseStream(url(client), "/api/v1/events") as stream:
        started = time.monotonic()
        stamps = []
        for _ in range(4):
            event = await stream.next(2, skip_keepalive=False)
            assert (event.event, event.data) == ("keepalive", "{}")
            stamps.append(time.monotonic())
    assert stamps[0] - started < 0.3 + 0.2  # the first within one interval of connecting
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert all(0.2 < gap < 0.5 for gap in gaps), gaps  # then every 0.3 s


async def test_bad_last_event_id_is_a_400(client):
    from tests.support import auth

    for bad in ("abc", "-1", "1.5", "99999999999999999999999"):
        response = await client.get(f"/api/v1/events?last_event_id={bad}", headers=auth())
        assert response.status == 400, bad
        assert "last event id" in (await response.json())["detail"]
    header = await client.get("/api/v1/events", headers={**auth(), "Last-Event-ID": "x1"})
    assert header.status == 400
    future = await client.get("/api/v1/events?last_event_id=500", headers=auth())
    assert future.status == 400
    assert "beyond" in (await future.json())["detail"]
    for path in ("/api/v1/a2a/events", "/api/v1/agui/events"):
        response = await client.get(f"{path}?last_event_id=nope", headers=auth())
        assert response.status == 400


async def test_many_subscribers_get_everything_in_order(client):
    ctx = client.app[CONTEXT]
    streams = [SseStream(url(client), "/api/v1/events") for _ in range(40)]
    await asyncio.gather(*(s.__aenter__() for s in streams))
    try:
        assert client.app[BUS].count("events") == 40
        envelopes = await ctx.store.append_many(
            [NewEvent("payer", "log", {"level": "info", "message": str(i)}) for i in range(25)]
        )
        expected = [str(e.position) for e in envelopes]
        received = await asyncio.gather(*(s.take(25) for s in streams))
        for events in received:
            assert [e.id for e in events] == expected
    finally:
        await asyncio.gather(*(s.close() for s in streams))
    await until(lambda: client.app[BUS].count() == 0, 2.5, "every subscriber is gone")


async def test_a2a_stream_maps_task_events(client):
    ctx = client.app[CONTEXT]
    async with SseStream(url(client), "/api/v1/a2a/events") as stream:
        created = await ctx.store.append(
            "worker", "task.created", {"id": "t1", "from": "boss", "to": "worker", "input": {}}
        )
        await ctx.store.append("worker", "log", {"level": "info", "message": "not a task"})
        await ctx.store.append("worker", "task.started", {"id": "t1"})
        await ctx.store.append("worker", "task.progress", {"id": "t1", "progress": "half"})
        await ctx.store.append("worker", "task.completed", {"id": "t1", "output": {"ok": 1}})
        # no task t2 exists and t1 is final: the state machine changes nothing, nothing shows
        await ctx.store.append("worker", "task.failed", {"id": "t2", "error": "no"})
        await ctx.store.append("worker", "task.canceled", {"id": "t1", "operator": "late"})
        await ctx.store.append("worker", "task.created", {"id": "t3", "from": "boss", "input": {}})
        await ctx.store.append("worker", "task.canceled", {"id": "t3", "operator": "carol"})
        events = await stream.take(6)
    assert [e.event for e in events] == [
        "task_created",
        "task_started",
        "task_progress",
        "task_completed",
        "task_created",
        "task_failed",
    ]
    assert events[0].id == str(created.position)
    assert json.loads(events[0].data) == {
        "id": "t1",
        "from": "boss",
        "to": "worker",
        "status": "pending",
        "created_at": created.event.ts,
    }
    assert [e.json() for e in events[1:4]] + [events[5].json()] == [
        {"id": "t1"},
        {"id": "t1", "progress": "half"},
        {"id": "t1", "output": {"ok": 1}},
        {"id": "t3", "error": "canceled by carol"},
    ]


async def test_each_stream_route_exists_once_and_is_served_here(client):
    from node.api import streams as api

    handlers = {
        "/api/v1/events": api.unified_events,
        "/api/v1/agents/stream": api.agent_events,
        "/api/v1/a2a/events": api.a2a_events,
        "/api/v1/agui/events": api.agui_events,
    }
    for path, handler in handlers.items():
        routes = [
            r
            for r in client.app.router.routes()
            if r.method == "GET" and r.resource is not None and r.resource.canonical == path
        ]
        assert [r.handler for r in routes] == [handler], path
