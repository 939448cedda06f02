"""GET /api/v1/events, /api/v1/agents/stream, /api/v1/a2a/events, /api/v1/agui/events."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from node.api.params import required_query
from node.auth import add_route
from node.context import CONTEXT, NodeContext, context_of
from node.errors import Problem
from node.streams.agui import AguiView
from node.streams.bus import Channel, EventBus, Subscription
from node.streams.replay import backlog
from node.streams.sse import ClientGone, SseWriter, open_stream

log = logging.getLogger(__name__)


def bus_of(ctx: NodeContext) -> EventBus:
    return ctx.services["bus"]


async def unified_events(request: web.Request) -> web.StreamResponse:
    return await _journal_stream(request, "events", None)


async def agent_events(request: web.Request) -> web.StreamResponse:
    agent = required_query(request, "agent")
    _ensure_known(context_of(request), agent)
    return await _journal_stream(request, "events", agent)


async def a2a_events(request: web.Request) -> web.StreamResponse:
    return await _journal_stream(request, "a2a", None)


async def agui_events(request: web.Request) -> web.StreamResponse:
    """STATE_SNAPSHOT first, then live AG-UI events; a reconnect resyncs with a new snapshot."""
    ctx = context_of(request)
    bus = _open_bus(ctx)
    resume_from(request)  # validated (a bad one is a 400) but nothing is replayed: see docs
    agent = request.query.get("agent") or None
    if agent is not None:
        _ensure_known(ctx, agent)
    view = AguiView()
    # snapshot and subscription in one synchronous step: every later change arrives as a delta
    snapshot = bus.agui_snapshot(_current_statuses(ctx, bus))
    sub = bus.subscribe("agui", agent=agent, accept=view.accept)

    async def first(writer: SseWriter) -> None:
        await writer.write_items([snapshot])

    return await _serve(request, bus, sub, first)


def resume_from(request: web.Request) -> int | None:
    """`Last-Event-ID` (what an EventSource sends on reconnect) wins over `?last_event_id=`,
    which is the stale one when the browser reconnects to the original URL."""
    raw = request.headers.get("Last-Event-ID") or request.query.get("last_event_id")
    if raw is None or raw.strip() == "":
        return None
    raw = raw.strip()
    if not raw.isascii() or not raw.isdigit() or len(raw) > 18:
        raise Problem(400, f"last event id must be a non-negative integer, got {raw[:40]!r}")
    return int(raw)


def _ensure_known(ctx: NodeContext, agent: str) -> None:
    """Known: configured here, or a journal this node holds (a peer's agent, a reporter)."""
    if ctx.config.agent(agent) is None and agent not in ctx.projections["journals"].head:
        raise Problem(404, f"no agent named {agent!r} on this node")


def _open_bus(ctx: NodeContext) -> EventBus:
    bus = bus_of(ctx)
    if ctx.shutting_down or bus.closed:
        raise Problem(503, "the node is shutting down; reconnect to it (or a peer) later")
    return bus


async def _journal_stream(
    request: web.Request, channel: Channel, agent: str | None
) -> web.StreamResponse:
    ctx = context_of(request)
    bus = _open_bus(ctx)
    after = resume_from(request)
    head = ctx.store.last_position
    if after is not None and after > head:
        raise Problem(
            400, f"last event id {after} is beyond this node's journal (newest is {head})"
        )
    # subscribe at `head` with no await in between: live items are all past it
    sub = bus.subscribe(channel, agent=agent)

    async def first(writer: SseWriter) -> None:
        if after is not None:
            writer.last_position = after
            async with contextlib.aclosing(
                backlog(ctx.store, channel, agent, after, head, bus.allows)
            ) as chunks:
                async for chunk in chunks:
                    await writer.write_items(chunk)
        writer.last_position = max(writer.last_position, head)

    return await _serve(request, bus, sub, first)


async def _serve(
    request: web.Request,
    bus: EventBus,
    sub: Subscription,
    first: Callable[[SseWriter], Awaitable[None]],
) -> web.StreamResponse:
    """Open the stream, write what comes `first`, then live items until the client goes."""
    writer: SseWriter | None = None
    try:
        response = await open_stream(request)
        sub.on_cut = _aborter(request)
        writer = SseWriter(response, sub)
        await first(writer)
        await writer.pump()
    except (ClientGone, ConnectionError):
        pass
    finally:
        bus.unsubscribe(sub)
    return writer.response if writer else web.Response(status=204)


def _current_statuses(ctx: NodeContext, bus: EventBus) -> list[tuple[str, str]]:
    runtime = ctx.services.get("runtime")
    statuses = getattr(runtime, "statuses", None)
    if callable(statuses):
        try:
            return [(s.name, s.status) for s in statuses()]
        except Exception:
            log.exception("runtime statuses unavailable; AG-UI snapshot uses the last known")
    known = bus.agui.states
    return [(a.name, known.get(a.name) or "stopped") for a in ctx.config.agents]


def _aborter(request: web.Request) -> Callable[[], None]:
    transport = request.transport

    def abort() -> None:
        if transport is not None:
            transport.abort()

    return abort


async def _bus_lifecycle(app: web.Application) -> AsyncIterator[None]:
    """Fed by commits once the journal is open (after the projections, which fold first)."""
    ctx = app[CONTEXT]
    bus = bus_of(ctx)
    bus.bind(asyncio.get_running_loop())
    bus.allows = ctx.projections["owners"].allows
    ctx.store.add_commit_listener(bus.on_commit)
    yield
    bus.close()


async def _close_streams(app: web.Application) -> None:
    bus_of(app[CONTEXT]).close()


def setup(app: web.Application) -> None:
    ctx = app[CONTEXT]
    node = ctx.config.node
    ctx.services["bus"] = EventBus(node.sse_queue_max, node.sse_keepalive_secs)
    add_route(app, "GET", "/api/v1/events", unified_events, "read")
    add_route(app, "GET", "/api/v1/agents/stream", agent_events, "read")
    add_route(app, "GET", "/api/v1/a2a/events", a2a_events, "read")
    add_route(app, "GET", "/api/v1/agui/events", agui_events, "read")
    app.cleanup_ctx.append(_bus_lifecycle)
    app.on_shutdown.append(_close_streams)
