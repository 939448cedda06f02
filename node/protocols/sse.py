"""The SSE wire of the protocol endpoints: `data:` frames of JSON, comment keep-alives.

Both A2A (JSON-RPC responses) and AG-UI (events) put one JSON document per `data:` line and
use no event names; a comment line keeps proxies and idle clients from closing the stream and
tells the node when its client has gone.
"""

from __future__ import annotations

import contextlib
from typing import Any

import msgspec
from aiohttp import web

from node.streams.sse import HEADERS

KEEPALIVE = b": keepalive\n\n"
_encoder = msgspec.json.Encoder()


class ClientGone(Exception):
    """The client closed the connection; the stream ends quietly."""


class SseOut:
    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.response = web.StreamResponse(headers=HEADERS)

    async def open(self) -> None:
        await self.response.prepare(self.request)

    async def send(self, data: Any) -> None:
        await self._write(b"data: " + _encoder.encode(data) + b"\n\n")

    async def send_last(self, data: Any) -> None:
        """A final event (an error) that may find the client already gone."""
        with contextlib.suppress(ClientGone):
            await self.send(data)

    async def ping(self) -> None:
        await self._write(KEEPALIVE)

    async def close(self) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self.response.write_eof()

    async def _write(self, frame: bytes) -> None:
        try:
            await self.response.write(frame)
        except (ConnectionError, RuntimeError) as exc:  # RuntimeError: transport closed
            raise ClientGone(str(exc) or type(exc).__name__) from None
