"""The SSE wire: the loop that writes frames (frames.py: encoded once, shared) to one client;
and `SseOut`, the protocol endpoints' plain stream of JSON `data:` frames.

Why not aiohttp-sse's EventSourceResponse: its ping is a comment line where the spec wants
`event: keepalive` / `data: {}`, it formats every frame per client (1,000 clients would encode
each event 1,000 times), and a client cut for being slow must be aborted at the transport, which
it does not offer. A plain StreamResponse writing pre-encoded bytes does all three.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import msgspec
from aiohttp import web

from node.ops.logsetup import stream_headers
from node.streams.frames import Item

if TYPE_CHECKING:
    from node.streams.bus import Subscription

KEEPALIVE = b"event: keepalive\ndata: {}\n\n"
# A2A and AG-UI put one JSON document per `data:` line and use no event names; a comment line
# keeps proxies and idle clients from closing the stream and tells the node its client left.
COMMENT_KEEPALIVE = b": keepalive\n\n"
HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",  # a reverse proxy must not buffer the stream
}
_BATCH = 512  # items taken from a client's queue at once when it is behind
WRITE_BYTES = 64 * 1024  # frames joined into one socket write, at most (a bigger frame: alone)
_data_encoder = msgspec.json.Encoder()


def sse_content(events: str) -> dict[str, object]:
    """An OpenAPI content map of an SSE response."""
    return {"text/event-stream": {"type": "string", "description": f"Server-Sent Events: {events}"}}


class ClientGone(Exception):
    """The client went away or was cut; the stream ends without an error response."""


class SseWriter:
    """Writes frames to one prepared response; aborts cleanly when the peer is gone."""

    def __init__(self, response: web.StreamResponse, subscription: Subscription) -> None:
        self.response = response
        self.subscription = subscription
        self.last_position = 0  # journaled events at or below this were sent already

    async def write(self, data: bytes) -> None:
        if self.subscription.closed:  # cut, gone, or shutting down: stop at once
            raise ClientGone(self.subscription.reason)
        self.subscription.writing = True
        try:
            await self.response.write(data)
        except (ConnectionError, RuntimeError) as exc:
            # RuntimeError: aiohttp refuses writes once the transport is closed
            raise ClientGone(str(exc) or type(exc).__name__) from None
        finally:
            self.subscription.writing = False

    async def write_items(self, items: Iterable[Item]) -> None:
        """Send items in order, skipping journaled ones already sent (the resumption seam).

        Small frames are joined into writes of up to `WRITE_BYTES`, a big frame goes alone:
        each write waits for the socket to drain below aiohttp's mark, so what is buffered for
        a client stays near one write, never a whole batch joined into one bytes object."""
        frames: list[bytes] = []
        size = 0
        for item in items:
            if item.position is not None:
                if item.position <= self.last_position:
                    continue
                self.last_position = item.position
            frame = item.frame
            if frames and size + len(frame) > WRITE_BYTES:
                await self.write(b"".join(frames))
                frames, size = [], 0
            frames.append(frame)
            size += len(frame)
        if frames:
            await self.write(b"".join(frames))

    async def pump(self) -> None:
        """Live tail: queued items as they come, and a keep-alive when the bus's ticker says."""
        sub = self.subscription
        while not sub.closed:
            if not sub.pending and not sub.ping_due:
                await sub.wait()
            if sub.closed:
                break
            items = sub.take(_BATCH)
            if items:
                await self.write_items(items)
            if sub.ping_due:
                sub.ping_due = False
                await self.write(KEEPALIVE)
        if sub.reason != "shutdown":
            raise ClientGone(sub.reason)


async def open_stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers=stream_headers(request, HEADERS))
    await response.prepare(request)
    return response


class SseOut:
    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.response = web.StreamResponse(headers=stream_headers(request, HEADERS))
        self.writing = False  # inside a socket write (a client that does not read: maybe long)

    def stop_writing(self) -> None:
        """Abort the connection if a write is under way (a stream ended from outside must not
        wait on a client that does not read); the handler's loop ends the rest."""
        transport = self.request.transport
        if self.writing and transport is not None:
            transport.abort()

    async def open(self) -> None:
        await self.response.prepare(self.request)

    async def send(self, data: Any) -> None:
        await self._write(b"data: " + _data_encoder.encode(data) + b"\n\n")

    async def send_event(self, event_id: str, data: Any) -> None:
        """A `data:` frame with an `id:` (a stream the client may resume after it)."""
        frame = b"id: " + event_id.encode() + b"\ndata: " + _data_encoder.encode(data) + b"\n\n"
        await self._write(frame)

    async def send_last(self, data: Any) -> None:
        """A final event (an error) that may find the client already gone."""
        with contextlib.suppress(ClientGone):
            await self.send(data)

    async def ping(self) -> None:
        await self._write(COMMENT_KEEPALIVE)

    async def close(self) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self.response.write_eof()

    async def _write(self, frame: bytes) -> None:
        self.writing = True
        try:
            await self.response.write(frame)
        except (ConnectionError, RuntimeError) as exc:  # RuntimeError: transport closed
            raise ClientGone(str(exc) or type(exc).__name__) from None
        finally:
            self.writing = False
