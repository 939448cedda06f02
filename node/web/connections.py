"""Connection limits aiohttp does not have: a deadline for a request's headers counted from the
accept, a cap on connections (in total and per client address) below the fd limit, and a
deadline on a client that stops reading a response.

aiohttp's only timer is its keep-alive one, armed at the accept with the idle timeout and not
reset by data; a connection that trickles a header line every few seconds is closed by it only
after `keepalive_timeout`, and a response nobody reads waits in the transport's buffer forever.
So the node serves with `GuardedRunner`: an AppRunner whose protocol factory makes
`GuardedHandler`s, aiohttp's RequestHandler with three hooks that cost nothing per request:

- `connection_made`: counts the connection (per address and in total) and arms the header
  deadline in place of aiohttp's first keep-alive timer. When the node is full, the newest
  connection takes the place of the oldest one that has not sent a whole request yet (a slow or
  silent client); when there is none, it gets a 503 and is closed. So operators, peers and the
  health check get in while a flood of slow connections lasts.
- `data_received`: until the first request's headers are complete, one check whether they are;
  then the deadline is disarmed and aiohttp's keep-alive timer (the idle deadline between
  requests, which also bounds the next request's headers) takes over.
- `pause_writing`/`resume_writing`: the transport's buffer went over its high-water mark; when
  the client has not read it down within the write deadline the connection is aborted, which
  frees the buffer (a close would keep it until it is sent).
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from dataclasses import dataclass
from typing import Any, cast

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from node.config.model import Config

log = logging.getLogger(__name__)
# what the node keeps of its fd limit for itself: LMDB, logs, peers, compiles, agents' files
FD_RESERVE_MIN = 64
_REFUSED_BODY = (
    b'{"type":"about:blank","title":"Service Unavailable","status":503,'
    b'"detail":"this node has too many open connections; retry shortly"}'
)
REFUSED = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"Content-Type: application/problem+json\r\n"
    b"Retry-After: 1\r\n"
    b"Connection: close\r\n"
    b"Content-Length: " + str(len(_REFUSED_BODY)).encode() + b"\r\n\r\n" + _REFUSED_BODY
)
_WARN_EVERY_SECS = 10.0


def fd_limit() -> int:
    """The process's soft RLIMIT_NOFILE."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def connection_cap(configured: int, fds: int) -> int:
    """At most `configured` (0: no figure of its own), and always room below the fd limit:
    a quarter of it, at least FD_RESERVE_MIN, stays for the node's own files and sockets."""
    room = max(1, fds - max(FD_RESERVE_MIN, fds // 4))
    return min(configured, room) if configured > 0 else room


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout: float
    write_timeout: float
    max_total: int
    max_per_client: int

    @classmethod
    def of(cls, config: Config) -> ConnectionLimits:
        node = config.node
        return cls(
            header_timeout=node.header_timeout_secs,
            write_timeout=node.write_timeout_secs,
            max_total=connection_cap(node.max_connections, fd_limit()),
            max_per_client=node.max_connections_per_client,
        )


class ConnectionTable:
    """Open connections per client address, and those still waiting for their first request
    (oldest first: the ones to let go when the node is full)."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.total = 0
        self.per_client: dict[str, int] = {}
        # insertion order: oldest first; in all, and per address
        self.fresh: dict[GuardedHandler, str] = {}
        self.fresh_of: dict[str, dict[GuardedHandler, None]] = {}
        self.refused = 0
        self.evicted = 0
        self.timed_out = 0
        self.write_aborted = 0
        self._warned_at = 0.0

    def admit(self, handler: GuardedHandler, client: str) -> bool:
        """Count the connection in; False when it must be refused."""
        limits = self.limits
        if self.per_client.get(client, 0) >= limits.max_per_client:
            if not self._evict(client):
                return self._refuse(client, "for this address")
        elif self.total >= limits.max_total and not self._evict(None):
            return self._refuse(client, "in total")
        self.total += 1
        self.per_client[client] = self.per_client.get(client, 0) + 1
        self.fresh[handler] = client
        self.fresh_of.setdefault(client, {})[handler] = None
        return True

    def has_request(self, handler: GuardedHandler) -> None:
        """The connection sent a whole request: no longer one to let go first."""
        client = self.fresh.pop(handler, None)
        if client is not None:
            of_client = self.fresh_of[client]
            del of_client[handler]
            if not of_client:
                del self.fresh_of[client]

    def release(self, handler: GuardedHandler, client: str) -> None:
        self.has_request(handler)
        self.total -= 1
        left = self.per_client[client] - 1
        if left:
            self.per_client[client] = left
        else:
            del self.per_client[client]

    def _evict(self, client: str | None) -> bool:
        """Close the oldest connection (of `client`, or of anyone) without a request yet."""
        candidates = self.fresh if client is None else self.fresh_of.get(client, {})
        handler = next(iter(candidates), None)
        if handler is None:
            return False
        self.evicted += 1
        self.warn(f"evicting a connection from {handler.client} that sent no request yet")
        self.has_request(handler)  # not evicted twice; its connection_lost releases it
        handler.drop()
        return True

    def _refuse(self, client: str, where: str) -> bool:
        self.refused += 1
        self.warn(f"refusing a connection from {client}: too many connections {where}")
        return False

    def warn(self, message: str) -> None:
        """Log the limit a client hit (at most every 10 s), with the counts so far."""
        now = time.monotonic()
        if now - self._warned_at >= _WARN_EVERY_SECS:
            self._warned_at = now
            log.warning(
                "%s (%d open, %d refused, %d evicted, %d header timeouts, %d write timeouts "
                "so far)",
                message,
                self.total,
                self.refused,
                self.evicted,
                self.timed_out,
                self.write_aborted,
            )


class GuardedHandler(RequestHandler):
    """aiohttp's RequestHandler with a header deadline, the connection table and a write
    deadline (the module's docstring says how)."""

    __slots__ = ("_client", "_counted", "_header_timer", "_table", "_waiting", "_write_timer")

    def __init__(self, manager: web.Server, table: ConnectionTable, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._table = table
        self._client = ""
        self._header_timer: asyncio.TimerHandle | None = None
        self._write_timer: asyncio.TimerHandle | None = None
        self._counted = False
        self._waiting = True  # for the first request's headers

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        self._client = str(peer[0]) if isinstance(peer, tuple) and peer else "unix"
        if not self._table.admit(self, self._client):
            refused = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
            refused.write(REFUSED)
            refused.close()
            return
        self._counted = True
        super().connection_made(transport)
        # this deadline replaces aiohttp's first keep-alive timer; aiohttp arms the idle one
        # after each response
        if self._keepalive_handle is not None:
            self._keepalive_handle.cancel()
            self._keepalive_handle = None
        self._header_timer = self._loop.call_later(
            self._table.limits.header_timeout, self._headers_late
        )

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._waiting and self._messages:
            self._headers_in()

    def _headers_in(self) -> None:
        self._waiting = False
        self._table.has_request(self)
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if self._waiting and not self._messages:
            self._table.timed_out += 1
            self._table.warn(f"closing a connection from {self._client}: no request in time")
            self.drop()

    @property
    def client(self) -> str:
        return self._client

    def drop(self) -> None:
        """Close at once, whatever is buffered."""
        self._waiting = False
        transport = self.transport
        if transport is not None:
            transport.abort()

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_timer is None:
            self._write_timer = self._loop.call_later(
                self._table.limits.write_timeout, self._write_late
            )

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _write_late(self) -> None:
        self._write_timer = None
        if self.writing_paused:
            self._table.write_aborted += 1
            self._table.warn(f"dropping a connection from {self._client}: it stopped reading")
            self.drop()

    def connection_lost(self, exc: BaseException | None) -> None:
        if not self._counted:
            return  # refused: aiohttp never saw it
        self._counted = False
        self._table.release(self, self._client)
        for timer in (self._header_timer, self._write_timer):
            if timer is not None:
                timer.cancel()
        self._header_timer = self._write_timer = None
        super().connection_lost(exc)


class GuardedServer(web.Server):
    """aiohttp's Server, making GuardedHandlers."""

    def __init__(self, server: web.Server, table: ConnectionTable) -> None:
        # the app's own Server as AppRunner made it (aiohttp 3.10-3.14 keep its loop and the
        # handlers' arguments in these two attributes; a test through a node process fails
        # at once if that changes)
        super().__init__(
            server.request_handler,
            request_factory=server.request_factory,
            handler_cancellation=server.handler_cancellation,
            loop=server._loop,
            **server._kwargs,
        )
        self.table = table

    def __call__(self) -> RequestHandler:
        return GuardedHandler(self, self.table, loop=self._loop, **self._kwargs)


class GuardedRunner(web.AppRunner):
    """An AppRunner whose sites accept connections through a ConnectionTable."""

    def __init__(self, app: web.Application, limits: ConnectionLimits, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.table = ConnectionTable(limits)

    async def _make_server(self) -> web.Server:
        return GuardedServer(await super()._make_server(), self.table)
