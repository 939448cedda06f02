"""The protocol streams' stop signal: set when the node shuts down, so every open stream ends
promptly instead of holding up the server's shutdown."""

from __future__ import annotations

import asyncio

from aiohttp import web

STOPPING: web.AppKey[asyncio.Event] = web.AppKey("protocol_streams_stopping", asyncio.Event)


def install(app: web.Application) -> None:
    app[STOPPING] = asyncio.Event()
    app.on_shutdown.append(_stop)


async def _stop(app: web.Application) -> None:
    app[STOPPING].set()


class StopSignal:
    """One stream's view of the node's stop signal: a future it can wait on with others."""

    def __init__(self, app: web.Application) -> None:
        self.event = app[STOPPING]
        self.future: asyncio.Task[bool] = asyncio.ensure_future(self.event.wait())

    @property
    def is_set(self) -> bool:
        return self.event.is_set()

    def close(self) -> None:
        self.future.cancel()
