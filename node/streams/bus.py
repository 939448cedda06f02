"""The one in-process event bus behind every SSE stream.

Fed from two sides: journal commits (the store's commit listener, on the loop, in position
order: these events carry their global position as SSE id and can be replayed) and the runtime
(`publish` / `publish_threadsafe`: ephemeral events such as `token`, never stored). Each event
is encoded once and the same bytes go to every subscriber, so fan-out to 1,000 clients is 1,000
deque appends. A subscriber's queue is bounded: a client that falls past it is cut (its
transport aborted) rather than allowed to grow the node's memory; it resumes by id.

What the runtime publishes (docs/streams.md has the full contract):
  token {agent, text} · tool_call_start {agent, tool, args} · tool_call_end {agent, tool, result}
  · agent_complete {agent, duration_ms} → the unified and per-agent streams;
  RUN_STARTED/RUN_FINISHED/RUN_ERROR {agent, run_id, ...} · TEXT_MESSAGE_START/CONTENT/END
  {agent, run_id, message_id?, text?} · TOOL_CALL_START/END {agent, run_id, tool_call_id?, tool,
  args?, result?} → the AG-UI stream; agent_status {agent, status} → both (STATE_DELTA on AG-UI).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol

from aiohttp import web

from eventstore.envelope import Envelope
from node.streams.frames import Item

log = logging.getLogger(__name__)
Channel = Literal["events", "a2a", "agui"]


class ChannelAdapter(Protocol):
    """What one channel makes of journaled and runtime events (node.streams.mapping's
    UnifiedChannel and A2AChannel, node.agui.stream's AguiTranslator)."""

    # True when the adapter keeps state from every event even with nobody subscribed
    stateful: bool

    def on_journal(self, envelope: Envelope) -> list[Item]: ...

    def on_runtime(self, name: str, data: dict[str, Any], agent: str | None) -> list[Item]: ...


class Subscription:
    """One client's bounded queue on one channel, optionally filtered to one agent."""

    __slots__ = (
        "_items",
        "_waiter",
        "accept",
        "agent",
        "channel",
        "closed",
        "limit",
        "on_cut",
        "ping_due",
        "reason",
        "writing",
    )

    def __init__(
        self,
        channel: Channel,
        limit: int,
        agent: str | None = None,
        accept: Callable[[Item], bool] | None = None,
    ) -> None:
        self.channel = channel
        self.limit = limit
        self.agent = agent
        self.accept = accept
        self.closed = False
        self.reason = ""
        self.writing = False  # the client's handler is inside a socket write
        self.ping_due = False  # a keep-alive is to be sent
        self.on_cut: Callable[[], None] | None = None  # aborts the client's transport
        self._items: deque[Item] = deque()
        self._waiter: asyncio.Future[None] | None = None

    @property
    def pending(self) -> int:
        return len(self._items)

    def offer(self, item: Item) -> None:
        if self.closed:
            return
        # an agent's stream shows that agent only; AG-UI state events (no agent) reach everyone
        shared = item.agent is None and self.channel == "agui"
        if self.agent is not None and item.agent != self.agent and not shared:
            return
        if self.accept is not None and not self.accept(item):
            return
        if len(self._items) >= self.limit:
            self.cut("overflow")
            return
        self._items.append(item)
        self._wake()

    def take(self, limit: int) -> list[Item]:
        items = self._items
        if len(items) <= limit:
            out = list(items)
            items.clear()
            return out
        return [items.popleft() for _ in range(limit)]

    async def wait(self) -> None:
        """Until an item is queued, a keep-alive is due, or the subscription closes."""
        if self._items or self.closed or self.ping_due:
            return
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def ping(self) -> None:
        self.ping_due = True
        self._wake()

    def cut(self, reason: str) -> None:
        """Drop everything queued and abort the client: it is too slow, or gone."""
        if self.closed:
            return
        self.closed = True
        self.reason = reason
        self._items.clear()
        self._wake()
        if self.on_cut is not None:
            self.on_cut()

    def finish(self, reason: str) -> None:
        """End the stream cleanly; a client stuck in a write is aborted instead."""
        if self.closed:
            return
        if self.writing:
            self.cut(reason)
            return
        self.closed = True
        self.reason = reason
        self._items.clear()
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class EventBus:
    """Fan-out of journaled and ephemeral events to subscribers of the three channels."""

    def __init__(
        self,
        adapters: Mapping[Channel, ChannelAdapter],
        queue_max: int = 10_000,
        keepalive_secs: float = 15.0,
    ) -> None:
        self.adapters = dict(adapters)
        self.queue_max = queue_max
        self.keepalive_secs = keepalive_secs
        self._ticker: asyncio.Task[None] | None = None
        self.closed = False
        self.cuts = 0  # subscribers cut for being too slow, since start
        self._loop: asyncio.AbstractEventLoop | None = None
        self._subs: dict[Channel, dict[Subscription, None]] = {c: {} for c in self.adapters}

    # ----------------------------------------------------------------- lifecycle
    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop that `publish_threadsafe` hands events to; starts the keep-alive ticker."""
        self._loop = loop
        if self._ticker is None:
            self._ticker = loop.create_task(self._tick(), name="sse-keepalive")

    async def _tick(self) -> None:
        """One timer for every client (not one per client and wait): a keep-alive each interval."""
        while not self.closed:
            await asyncio.sleep(self.keepalive_secs)
            for subs in self._subs.values():
                for sub in tuple(subs):
                    sub.ping()

    def close(self) -> None:
        """Shutdown: end every stream (clients stuck in a write are aborted)."""
        self.closed = True
        if self._ticker is not None:
            self._ticker.cancel()
        for subs in self._subs.values():
            for sub in tuple(subs):
                sub.finish("shutdown")

    # ----------------------------------------------------------------- subscribers
    def subscribe(
        self,
        channel: Channel,
        *,
        agent: str | None = None,
        accept: Callable[[Item], bool] | None = None,
    ) -> Subscription:
        sub = Subscription(channel, self.queue_max, agent, accept)
        if self.closed:
            sub.finish("shutdown")
        else:
            self._subs[channel][sub] = None
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self._subs[sub.channel].pop(sub, None)
        if not sub.closed:
            sub.finish("gone")

    def count(self, channel: Channel | None = None) -> int:
        if channel is not None:
            return len(self._subs[channel])
        return sum(len(s) for s in self._subs.values())

    # ----------------------------------------------------------------- feeding
    def publish(self, name: str, data: dict[str, Any], *, agent: str | None = None) -> None:
        """An ephemeral event from the runtime; call on the event loop."""
        if self.closed:
            return
        agent = agent if agent is not None else data.get("agent")
        for channel, adapter in self.adapters.items():
            if adapter.stateful or self._subs[channel]:
                self.offer(channel, adapter.on_runtime(name, data, agent))

    def publish_threadsafe(
        self, name: str, data: dict[str, Any], *, agent: str | None = None
    ) -> None:
        """`publish` from an agent's worker thread; dropped when no loop runs (nobody listens)."""
        loop = self._loop
        if loop is None or self.closed:
            return
        with contextlib.suppress(RuntimeError):  # the loop closed under us: nobody listens
            loop.call_soon_threadsafe(self._publish_safely, name, data, agent)

    def _publish_safely(self, name: str, data: dict[str, Any], agent: str | None) -> None:
        try:
            self.publish(name, data, agent=agent)
        except Exception:  # a malformed runtime event must not kill the loop's callback
            log.exception("dropped a malformed %s event", name)

    def on_commit(self, envelopes: list[Envelope]) -> None:
        """The store's commit listener: journaled events, in global position order."""
        if self.closed:
            return
        for channel, adapter in self.adapters.items():
            if adapter.stateful or self._subs[channel]:
                on_journal, offer = adapter.on_journal, self.offer
                for envelope in envelopes:
                    try:
                        offer(channel, on_journal(envelope))
                    except Exception:  # one envelope's frames, never the rest of the batch
                        log.exception(
                            "no %s frames for %s#%s", channel, envelope.stream, envelope.seq
                        )

    def offer(self, channel: Channel, items: list[Item]) -> None:
        """Queue items for every subscriber of `channel`, cutting those that fall behind."""
        subs = self._subs[channel]
        if not items or not subs:
            return
        for sub in tuple(subs):
            for item in items:
                sub.offer(item)
            if sub.closed and sub.reason == "overflow":
                subs.pop(sub, None)
                self.cuts += 1
                log.warning("SSE client on %s cut: queue passed %d events", channel, sub.limit)


BUS = web.AppKey("bus", EventBus)
