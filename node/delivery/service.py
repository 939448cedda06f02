"""The outbox as the node runs it: its store, fold, dispatcher and progress, and the commands
and reads the API and the A2A endpoint use (push configs, delivery state)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator

from aiohttp import web
from nacl.signing import VerifyKey

from eventstore.store import NewEvent
from node.context import NodeContext
from node.delivery import book as b
from node.delivery import channels as ch
from node.delivery import store as s
from node.delivery.addresses import AddressPolicy, DestinationRefused, check_url
from node.delivery.dispatch import Dispatcher
from node.delivery.ingest import Ingester
from node.delivery.metrics import DeliveryMetrics
from node.delivery.progress import ProgressWriter
from node.delivery.sealing import Destination, seal, unseal
from node.delivery.waits import next_turn
from node.delivery.webhooks import Poster
from node.services.journal import ensure_local
from projections import catalogue as c
from projections.journals import Journals

log = logging.getLogger(__name__)
OUTBOX_DIR = "outbox"
SWEEP_SECS = 60.0
RESOLVE_TIMEOUT_SECS = 5.0


class Outbox:
    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx
        delivery = ctx.config.delivery
        self.policy = AddressPolicy(delivery.allow_networks)
        self.metrics = DeliveryMetrics(ctx.metrics.registry)
        self.channels = ch.Channels(ctx.config)
        self.book = b.Book(b.Limits.of(delivery))
        self.poster = Poster(
            self.policy, delivery.attempt_timeout_secs, delivery.in_flight, delivery.per_host
        )
        self.store: s.OutboxStore | None = None
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        store = self.store = s.OutboxStore(self.ctx.config.data_path / OUTBOX_DIR)
        self.writer = s.Writer(store)
        self.book.load(store)
        self.dispatcher = Dispatcher(
            self.ctx, self.book, store, self.writer, self.poster, self.channels, self.metrics
        )
        self.ingester = Ingester(
            self.ctx,
            self.book,
            self.writer,
            self.channels,
            self.metrics,
            self.dispatcher.schedule,
            self.dispatcher.unpark,
        )
        self.ingester.start_at(None if store.created else store.cursor())
        self.ctx.store.add_rewind_listener(self.ingester.on_rewind)
        while await self.ingester.step():  # what the journal holds beyond the cursor, first
            pass
        self.ingester.go_live()
        self.progress = ProgressWriter(self.ctx, self.book, self.writer)
        self._tasks = [
            asyncio.ensure_future(self.ingester.run(self._stopping)),
            asyncio.ensure_future(self.dispatcher.run(self._stopping)),
            asyncio.ensure_future(self.progress.run(self._stopping)),
            asyncio.ensure_future(self._sweeps()),
        ]

    async def close(self) -> None:
        self._stopping.set()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.store is None:
            return
        with contextlib.suppress(Exception):  # what the stopping agents journaled last
            while await self.ingester.step():
                pass
        await self.dispatcher.close()
        with contextlib.suppress(Exception):
            await self.progress.flush()
        await self.writer.idle()
        await self.poster.close()
        self.store.close()

    async def _sweeps(self) -> None:
        retention = self.ctx.config.delivery.retention_secs
        while not self._stopping.is_set():
            self._gauges()
            ops = self.book.sweep(retention)
            if ops:
                with contextlib.suppress(Exception):
                    await self.writer.submit(ops)
            await next_turn(self._stopping, SWEEP_SECS)

    def _gauges(self) -> None:
        for about in (b.PUSH, b.APPROVAL, b.BUDGET):
            self.metrics.pending.labels(about=about).set(self.book.pending_count(about))

    # ------------------------------------------------------------------ push configs
    async def check_destination(self, url: str) -> None:
        """Refuse (DestinationRefused) a URL whose host is not allowed: every address its name
        resolves to now is checked (and checked again at each delivery's connection)."""
        target = check_url(url, self.policy)
        host, port = target.host, target.port
        loop = asyncio.get_running_loop()
        try:
            infos = await asyncio.wait_for(
                loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), RESOLVE_TIMEOUT_SECS
            )
        except (OSError, TimeoutError):
            raise DestinationRefused(f"the host {host!r} does not resolve") from None
        self.policy.check(str(info[4][0]) for info in infos)

    def room_for(self, task_id: str, config_id: str, client: str) -> str | None:
        return self.book.config_room(task_id, config_id, client)

    def config_event(
        self, agent: str, task_id: str, config_id: str, client: str, destination: Destination
    ) -> NewEvent:
        """`push.configured`, its destination sealed to every node that may deliver it."""
        sealed = seal(destination, self._keys_for(agent))
        payload = c.PushConfigured(task=task_id, id=config_id, client=client, sealed=sealed)
        return NewEvent(agent, *c.event_of(payload))

    async def configure(
        self, agent: str, task_id: str, config_id: str, client: str, destination: Destination
    ) -> None:
        ensure_local(self.ctx, agent)
        event = self.config_event(agent, task_id, config_id, client, destination)
        envelope = await self.ctx.store.append(event.stream, event.type, event.data)
        await self.ingester.reached(envelope.position)

    async def remove(self, agent: str, task_id: str, config_id: str, operator: str) -> None:
        ensure_local(self.ctx, agent)
        payload = c.PushRemoved(task=task_id, id=config_id, operator=operator)
        envelope = await self.ctx.store.append(agent, *c.event_of(payload))
        await self.ingester.reached(envelope.position)

    def configs(self, task_id: str) -> list[tuple[s.PushConfig, Destination | None]]:
        """The task's configs in force, with their destinations where this node can open them."""
        return [
            (config, unseal(config.sealed, self.ctx.name, self.ctx.key))
            for config in sorted(self.book.configs_of(task_id), key=lambda x: x.seq)
        ]

    def lane(self, lane_id: str) -> s.Lane | None:
        return self.book.lane(lane_id)

    def push_lane(self, task_id: str, config_id: str) -> s.Lane | None:
        return self.book.lane(b.push_lane_id(task_id, config_id))

    def approval_lanes(self, approval_id: str) -> list[tuple[str, str, s.Lane | None]]:
        """(channel, kind, its lane or None) for every channel of this node's config."""
        return [
            (
                channel.name,
                channel.kind,
                self.book.lane(b.approval_lane_id(approval_id, channel.name)),
            )
            for channel in self.channels.channels
        ]

    def next_attempt(self, lane: s.Lane) -> float | None:
        head = self.book.head(lane.id)
        return max(lane.due, head.due) if head is not None else None

    def _keys_for(self, agent: str) -> dict[str, VerifyKey]:
        """This node's key, and those of the other nodes of the agent's placement set that
        this node knows (a node it has no key for cannot deliver after a failover)."""
        keys = {self.ctx.name: self.ctx.key.verify_key}
        placement = self.ctx.projections.get(Journals).placement_of(agent) or ()
        others = [name for name in placement if name != self.ctx.name]
        if others:
            from node.sync.keyring import key_resolver  # only placed agents need peers' keys

            lookup = key_resolver(self.ctx.config, self.ctx.key, self.ctx.store)
            for name in others:
                found = lookup(name)
                key = getattr(found, "current", found)
                if isinstance(key, VerifyKey):
                    keys[name] = key
        return keys

    def summary(self) -> dict[str, int]:
        return {
            "pending_push": self.book.pending_count(b.PUSH),
            "pending_approval": self.book.pending_count(b.APPROVAL),
            "in_flight": self.dispatcher.in_flight(),
            "ingest_lag": max(self.ctx.store.last_position - self.ingester.cursor, 0),
            "lanes": len(self.book.lanes),
        }


OUTBOX = web.AppKey("outbox", Outbox)


async def lifecycle(app: web.Application) -> AsyncIterator[None]:
    outbox = app[OUTBOX]
    await outbox.start()
    yield
    await outbox.close()
