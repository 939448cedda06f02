"""The sync service of one node: keys, acks, the receiver and one replicator per peer."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import aiohttp
from aiohttp import web

from node.context import NodeContext
from node.sync.acks import AckRecorder
from node.sync.http.replicator import Replicator
from node.sync.incidents import Incidents
from node.sync.keys import PeerKeys
from node.sync.rules.receiver import Receiver
from node.web.tls import peer_context
from projections.peers import PeerBook

if TYPE_CHECKING:
    from node.sync.nats.mesh import NatsMesh


class SyncService:
    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx
        self.incidents = Incidents(ctx)
        self.keys = PeerKeys(ctx, self.incidents, None)
        self.acks = AckRecorder(
            ctx.store, ctx.projections.get(PeerBook), ctx.config.sync.ack_flush_secs
        )
        self.receiver = Receiver(ctx, self.keys, self.incidents, self.acks)
        self.replicators: list[Replicator] = []
        self.nats: NatsMesh | None = None  # [mesh] transport = "nats"
        self._http: aiohttp.ClientSession | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Pin configured keys, then start the ack recorder and a replicator per peer."""
        self._http = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=self.ctx.config.sync.request_timeout_secs),
            connector=aiohttp.TCPConnector(ssl=peer_context(self.ctx.config) or True),
        )
        self.keys.http = self._http
        await self.keys.pin_configured()
        self._tasks = [asyncio.create_task(self.acks.run(), name="sync-acks")]
        if self.ctx.config.mesh.transport == "nats":
            from node.sync.nats.mesh import NatsMesh  # nats-py is an optional extra

            self.nats = NatsMesh(self.ctx, self.receiver, self.acks, self.incidents, self._http)
            self._tasks.append(asyncio.create_task(self.nats.run(), name="sync-nats"))
            return
        self.replicators = [
            Replicator(self.ctx, peer, self._http, self.keys, self.acks)
            for peer in self.ctx.config.peers
        ]
        self._tasks += [
            asyncio.create_task(r.run(), name=f"sync-to-{r.peer.name}") for r in self.replicators
        ]

    async def lifecycle(self, _app: object) -> AsyncIterator[None]:
        """Runs after the journal is open and the projections are rebuilt; stops before it
        closes."""
        await self.start()
        yield
        await self.stop()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.acks.flush()
        if self._http is not None:
            await self._http.close()


SYNC = web.AppKey("sync", SyncService)
