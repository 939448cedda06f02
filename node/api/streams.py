"""GET /api/v1/events, /api/v1/agents/stream, /api/v1/a2a/events, /api/v1/agui/events."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from node.agui.stream import AguiTranslator, AguiView
from node.context import CONTEXT, NodeContext, context_of
from node.runtime.agents import AGENTS
from node.streams.bus import BUS, Channel, ChannelAdapter, EventBus, Subscription
from node.streams.mapping import A2AChannel, UnifiedChannel
from node.streams.replay import backlog
from node.streams.slots import STREAM_SLOTS, StreamSlot, StreamSlots
from node.streams.sse import ClientGone, SseWriter, open_stream, sse_content
from node.web.http import NonNegative, Problem, required_query
from node.web.routes import Doc, Query, add_route
from projections.approvals import Approvals
from projections.journals import Journals
from projections.tasks import Tasks

log = logging.getLogger(__name__)
AGENT = Query("agent", str, "the agent whose events to stream", required=True)
OPTIONAL_AGENT = Query("agent", str, "only this agent's events")
LAST_EVENT_ID = Query(
    "last_event_id",
    NonNegative,
    "resume after this position (the Last-Event-ID header wins over it)",
)
AGUI = web.AppKey("agui_translator", AguiTranslator)


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
    bus = _open_bus(request)
    resume_from(request)  # validated (a bad one is a 400) but nothing is replayed: see docs
    agent = request.query.get("agent") or None
    if agent is not None:
        _ensure_known(ctx, agent)
    view = AguiView()
    translator = request.app[AGUI]
    slot = request.app[STREAM_SLOTS].open(request)
    # snapshot and subscription in one synchronous step: every later change arrives as a delta;
    # statuses changed unseen reach the clients already connected as deltas first
    bus.offer("agui", translator.sync(current_statuses(request.app)))
    snapshot = translator.snapshot_item()
    sub = bus.subscribe("agui", agent=agent, accept=view.accept)

    async def first(writer: SseWriter) -> None:
        await writer.write_items([snapshot])

    return await _serve(request, bus, sub, slot, first)


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
    if ctx.config.agent(agent) is None and agent not in ctx.projections.get(Journals).head:
        raise Problem(404, f"no agent named {agent!r} on this node")


def _open_bus(request: web.Request) -> EventBus:
    bus = request.app[BUS]
    if context_of(request).shutting_down or bus.closed:
        raise Problem(503, "the node is shutting down; reconnect to it (or a peer) later")
    return bus


async def _journal_stream(
    request: web.Request, channel: Channel, agent: str | None
) -> web.StreamResponse:
    ctx = context_of(request)
    bus = _open_bus(request)
    after = resume_from(request)
    head = ctx.store.last_position
    if after is not None and after > head:
        raise Problem(
            400, f"last event id {after} is beyond this node's journal (newest is {head})"
        )
    slots = request.app[STREAM_SLOTS]
    slot = slots.open(request)
    if after is not None and after < head:
        try:
            slots.begin_replay(slot)
        except web.HTTPException:
            slots.close(slot)
            raise
    # subscribe at `head` with no await in between: live items are all past it
    sub = bus.subscribe(channel, agent=agent)

    async def first(writer: SseWriter) -> None:
        if after is not None:
            writer.last_position = after
            try:
                async with contextlib.aclosing(
                    backlog(
                        ctx.store,
                        channel,
                        agent,
                        after,
                        head,
                        ctx.projections.get(Tasks).task_changes,
                    )
                ) as chunks:
                    async for chunk in chunks:  # the next is read once this one is written
                        await writer.write_items(chunk)
            finally:
                slots.end_replay(slot)
        writer.last_position = max(writer.last_position, head)

    return await _serve(request, bus, sub, slot, first)


async def _serve(
    request: web.Request,
    bus: EventBus,
    sub: Subscription,
    slot: StreamSlot,
    first: Callable[[SseWriter], Awaitable[None]],
) -> web.StreamResponse:
    """Open the stream, write what comes `first`, then live items until the client goes (or
    its token is revoked: the stream then ends)."""
    writer: SseWriter | None = None
    slot.on_revoke = lambda: sub.finish("revoked")
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
        request.app[STREAM_SLOTS].close(slot)
    return writer.response if writer else web.Response(status=204)


def current_statuses(app: web.Application) -> list[tuple[str, str]]:
    """(agent, status) for every configured agent: the runtime's, else the last seen."""
    agents = app[AGENTS]
    if agents.running:
        try:
            return agents.statuses()
        except Exception:
            log.exception("runtime statuses unavailable; AG-UI snapshot uses the last known")
    known = app[AGUI].states
    return [(a.name, known.get(a.name) or "stopped") for a in app[CONTEXT].config.agents]


def _aborter(request: web.Request) -> Callable[[], None]:
    transport = request.transport

    def abort() -> None:
        if transport is not None:
            transport.abort()

    return abort


async def _bus_lifecycle(app: web.Application) -> AsyncIterator[None]:
    """Fed by commits once the journal is open (after the projections, which fold first)."""
    ctx = app[CONTEXT]
    bus = app[BUS]
    bus.bind(asyncio.get_running_loop())
    ctx.store.add_commit_listener(bus.on_commit)
    yield
    bus.close()


async def _close_streams(app: web.Application) -> None:
    app[BUS].close()


def setup(app: web.Application) -> None:
    node = app[CONTEXT].config.node
    projections = app[CONTEXT].projections
    app[AGUI] = translator = AguiTranslator(
        projections.get(Tasks).approval_change, projections.get(Approvals).decided_at_once
    )
    adapters: dict[Channel, ChannelAdapter] = {
        "events": UnifiedChannel(),
        "a2a": A2AChannel(app[CONTEXT].projections.get(Tasks).task_changes),
        "agui": translator,
    }
    app[BUS] = EventBus(adapters, node.sse_queue_max, node.sse_keepalive_secs)
    app[STREAM_SLOTS] = StreamSlots(node)
    streams = (
        ("/api/v1/events", unified_events, "All journaled and runtime events", ()),
        ("/api/v1/agents/stream", agent_events, "One agent's events", (AGENT,)),
        ("/api/v1/a2a/events", a2a_events, "Task lifecycle events", ()),
        ("/api/v1/agui/events", agui_events, "AG-UI events", (OPTIONAL_AGENT,)),
    )
    for path, handler, summary, query in streams:
        doc = Doc(
            summary,
            "streams",
            content=sse_content(summary),
            errors=(400, 404, 429, 503),
            query=(*query, LAST_EVENT_ID),
            description="docs/streams.md has the events and their data.",
        )
        add_route(app, "GET", path, handler, "read", doc)
    app.cleanup_ctx.append(_bus_lifecycle)
    app.on_shutdown.append(_close_streams)
