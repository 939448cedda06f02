"""A2A tasks: create, list, read, and the task lifecycle SSE stream GET /api/v1/a2a/events.

The stream here is a small, self-contained fallback (it follows the journal with
`wait_beyond` + `read_all`, so it holds no queue and cannot grow memory). It is registered only
when no area set up before this one (node.streams, with ids, resumption and keep-alive events)
already serves GET /api/v1/a2a/events; `a2a_event` maps journal events to the spec's event names
and DESIGN.md's data.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import msgspec
from aiohttp import web
from aiohttp_sse import sse_response

from eventstore.envelope import Envelope
from node.api.params import json_body, json_response
from node.auth import add_route
from node.config import AgentName
from node.context import CONTEXT, context_of
from node.errors import Problem
from node.services.tasks import TaskService
from projections.tasks import STATUSES, Tasks

EVENTS_PATH = "/api/v1/a2a/events"
STOP_STREAMS: web.AppKey[asyncio.Event] = web.AppKey("a2a_stop_streams", asyncio.Event)


class NewTask(msgspec.Struct, forbid_unknown_fields=True):
    from_: AgentName = msgspec.field(name="from")
    to: AgentName
    input: dict[str, Any] = {}


def tasks_of(request: web.Request) -> TaskService:
    return context_of(request).services["tasks"]


async def create_task(request: web.Request) -> web.Response:
    body = await json_body(request, NewTask)
    created = await tasks_of(request).create(body.from_, body.to, body.input)
    return json_response(created, status=201)


async def list_tasks(request: web.Request) -> web.Response:
    status = request.query.get("status") or None
    if status is not None and status not in STATUSES:
        raise Problem(
            400, f"query parameter `status` must be one of {', '.join(STATUSES)}, got {status!r}"
        )
    agent = request.query.get("agent") or None
    return json_response(tasks_of(request).list(status, agent))


async def read_task(request: web.Request) -> web.Response:
    return json_response(tasks_of(request).get(request.match_info["task_id"]))


def a2a_event(envelope: Envelope) -> tuple[str, dict[str, Any]] | None:
    """A journal event → (SSE event name, data) for the A2A stream, or None if not a task event."""
    event = envelope.event
    data = event.data
    match event.type:
        case "task.created":
            return "task_created", {
                "id": data.get("id"),
                "from": data.get("from"),
                "to": envelope.stream,
                "status": "pending",
                "created_at": event.ts,
            }
        case "task.started":
            return "task_started", {"id": data.get("id")}
        case "task.progress":
            return "task_progress", {"id": data.get("id"), "progress": data.get("progress")}
        case "task.completed":
            return "task_completed", {"id": data.get("id"), "output": data.get("output")}
        case "task.failed":
            return "task_failed", {"id": data.get("id"), "error": data.get("error")}
    return None


async def a2a_events(request: web.Request) -> web.StreamResponse:
    """Task events committed after the client connected, until it leaves or the node stops."""
    ctx = context_of(request)
    stop = request.app[STOP_STREAMS]
    after = ctx.store.last_position
    async with sse_response(request, ping_interval=ctx.config.node.sse_keepalive_secs) as sse:
        gone = asyncio.ensure_future(sse.wait())
        stopping = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                more = asyncio.ensure_future(ctx.store.wait_beyond(after))
                await asyncio.wait({more, gone, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if not more.done():
                    more.cancel()
                    break
                for envelope in ctx.store.read_all(after, 1000):
                    after = envelope.position
                    mapped = a2a_event(envelope)
                    if mapped is not None:
                        name, data = mapped
                        await sse.send(
                            msgspec.json.encode(data).decode(), event=name, id=str(after)
                        )
        except ConnectionResetError:
            pass
        finally:
            for waiter in (gone, stopping):
                waiter.cancel()
                with contextlib.suppress(asyncio.CancelledError, ConnectionResetError):
                    await waiter
    return sse


async def stop_streams(app: web.Application) -> None:
    """On shutdown, end the streams so the server need not wait out its shutdown timeout."""
    app[STOP_STREAMS].set()


def setup(app: web.Application) -> None:
    ctx = app[CONTEXT]
    ctx.projections.register(Tasks())
    ctx.services["tasks"] = TaskService(ctx)
    add_route(app, "GET", "/api/v1/a2a/tasks", list_tasks, "read")
    add_route(app, "POST", "/api/v1/a2a/tasks", create_task, "operate")
    add_route(app, "GET", "/api/v1/a2a/tasks/{task_id}", read_task, "read")
    if not _served(app, "GET", EVENTS_PATH):
        app[STOP_STREAMS] = asyncio.Event()
        app.on_shutdown.append(stop_streams)
        add_route(app, "GET", EVENTS_PATH, a2a_events, "read")


def _served(app: web.Application, method: str, path: str) -> bool:
    return any(
        route.method == method and route.resource is not None and route.resource.canonical == path
        for route in app.router.routes()
    )
