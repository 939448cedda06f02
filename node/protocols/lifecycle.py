"""The protocol streams' stop signal: set when the node shuts down, so every open stream ends
promptly instead of holding up the server's shutdown, or for one stream whose token a reload
revoked."""

from __future__ import annotations

import asyncio

from aiohttp import web

from node.streams.sse import SseOut

STOPPING: web.AppKey[asyncio.Event] = web.AppKey("protocol_streams_stopping", asyncio.Event)


def install(app: web.Application) -> None:
    app[STOPPING] = asyncio.Event()
    app.on_shutdown.append(_stop)


async def _stop(app: web.Application) -> None:
    app[STOPPING].set()


class StopSignal:
    """One stream's view of the node's stop signal, which `end` also sets for this stream
    alone (its token was revoked): a future it can wait on with others."""

    def __init__(self, app: web.Application) -> None:
        self.event = app[STOPPING]
        self.reason = "the node is shutting down"
        self.code = "SHUTDOWN"
        self.future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._node_stopping = asyncio.ensure_future(self.event.wait())
        self._node_stopping.add_done_callback(lambda _: self._set())

    @property
    def is_set(self) -> bool:
        return self.event.is_set() or (self.future.done() and not self.future.cancelled())

    def end(self, reason: str, code: str) -> None:
        """Stop this stream only, saying why."""
        if not self.future.done():
            self.reason, self.code = reason, code
            self._set()

    def _set(self) -> None:
        if not self.future.done():
            self.future.set_result(None)

    def close(self) -> None:
        self._node_stopping.cancel()
        self.future.cancel()


def revoked(stop: StopSignal, out: SseOut) -> None:
    """The token that opened a protocol stream was revoked: the stream's loop ends (AG-UI's
    with a RUN_ERROR saying so), at once if the stream was stuck writing to its client."""
    stop.end("the token that opened this stream was revoked", "TOKEN_REVOKED")
    out.stop_writing()
