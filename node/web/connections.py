"""Connection limits aiohttp does not have: admission at the accept (before a TLS handshake), a
deadline for a request's headers counted from the accept, caps on connections (in total and per
client address, or IPv6 /64) below the fd limit, eviction of the connections that do nothing,
a few slots kept for the health check and admin tokens, and a deadline on a client that stops
reading a response.

aiohttp's only timer is its keep-alive one, armed at the accept with the idle timeout and not
reset by data; a connection that trickles a header line every few seconds is closed by it only
after `keepalive_timeout`, and a response nobody reads waits in the transport's buffer forever.
So the node serves with `GuardedRunner`: an AppRunner whose protocol factory makes
`GuardedHandler`s, aiohttp's RequestHandler with hooks that cost nothing per request:

- admission (`admit`, at the accept: in `connection_made` for plain HTTP, in the TLS layer's
  `connection_made` before the handshake with TLS, node/web/tlsaccept.py): counts the connection
  (per client and in total) and arms the header deadline in place of aiohttp's first
  keep-alive timer (with TLS the handshake's deadline is the header deadline, and what is left
  of it bounds the headers). When the node is full, the newest connection takes the place of
  the oldest one that has not sent a whole request yet (a slow or silent client, accepted at
  least a second ago: a newcomer gets that long), else of the oldest idle keep-alive connection
  (between two requests); when there is neither, it gets one of the `reserved` slots (one per
  client at a time), which serve only `GET /api/v1/health` and admin tokens (the front door
  answers anything else 503), else a 503 (plain HTTP) or a close (TLS) at once.
- `data_received`: once a request's headers are complete, the connection is busy (not
  evictable) and the header deadline is disarmed; `log_access`, called by aiohttp when a
  response is finished, makes it idle (evictable) again; aiohttp's keep-alive timer bounds
  the idle time and the next request's headers.
- `pause_writing`/`resume_writing`: the transport's buffer went over its high-water mark; when
  the client has not read it down within the write deadline the connection is aborted, which
  frees the buffer (a close would keep it until it is sent).

Every close and refusal is counted (`svc_http_connections_closed_total{reason}`) and logged at
most every 10 s with the counts so far.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice
from typing import Any, cast

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from node.config.model import Config
from node.ops.metrics import CONNECTION_REASONS
from node.web.inflight import release_request
from node.web.tlsaccept import TlsListener, tls_protocol

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
# a connection younger than this is evicted only for a lighter client's newcomer (_evict)
SILENT_GRACE_SECS = 1.0
HEAVIER_SCAN = 8  # young silent connections looked at for a heavier client's, oldest first


def fd_limit() -> int:
    """The process's soft RLIMIT_NOFILE."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def connection_cap(configured: int, fds: int) -> int:
    """At most `configured` (0: no figure of its own), and always room below the fd limit:
    a quarter of it, at least FD_RESERVE_MIN, stays for the node's own files and sockets."""
    room = max(1, fds - max(FD_RESERVE_MIN, fds // 4))
    return min(configured, room) if configured > 0 else room


def client_key(address: str, ipv6_prefix: int) -> str:
    """What a client's connections are counted under: its IPv4 address, or the /`ipv6_prefix`
    network of its IPv6 address (one host is usually given a whole /64)."""
    if ":" not in address:
        return address
    try:
        ip = ipaddress.IPv6Address(address.split("%", 1)[0])
    except ValueError:
        return address
    if ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    if ipv6_prefix >= 128:
        return str(ip)
    host_bits = 128 - ipv6_prefix
    return str(ipaddress.IPv6Network((int(ip) >> host_bits << host_bits, ipv6_prefix)))


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout: float
    write_timeout: float
    max_total: int
    max_per_client: int
    reserved: int = 0
    ipv6_prefix: int = 64

    @classmethod
    def of(cls, config: Config) -> ConnectionLimits:
        node = config.node
        total = connection_cap(node.max_connections, fd_limit())
        return cls(
            header_timeout=node.header_timeout_secs,
            write_timeout=node.write_timeout_secs,
            max_total=total,
            max_per_client=node.max_connections_per_client,
            reserved=min(node.reserved_connections, total - 1),
            ipv6_prefix=node.ipv6_client_prefix,
        )


class _Queue:
    """Connections in the order they joined (oldest first), in all and per client."""

    __slots__ = ("all", "of")

    def __init__(self) -> None:
        self.all: dict[GuardedHandler, str] = {}
        self.of: dict[str, dict[GuardedHandler, None]] = {}

    def add(self, handler: GuardedHandler, client: str) -> None:
        self.all[handler] = client
        self.of.setdefault(client, {})[handler] = None

    def remove(self, handler: GuardedHandler) -> None:
        client = self.all.pop(handler, None)
        if client is not None:
            of_client = self.of[client]
            del of_client[handler]
            if not of_client:
                del self.of[client]

    def oldest(self, client: str | None) -> GuardedHandler | None:
        return next(iter(self.all if client is None else self.of.get(client, ())), None)


class ConnectionTable:
    """Open connections per client, and the evictable ones: those still waiting for their first
    request (`silent`) and idle keep-alive ones between requests (`idle`), oldest first."""

    def __init__(
        self, limits: ConnectionLimits, count: Callable[[str], None] | None = None
    ) -> None:
        self.limits = limits
        self.total = 0
        self.per_client: dict[str, int] = {}
        self.reserved_of: dict[str, int] = {}  # reserved slots per client (at most one)
        self.silent = _Queue()
        self.idle = _Queue()
        self.counts = dict.fromkeys(CONNECTION_REASONS, 0)
        self._count = count or (lambda reason: None)
        self._warned_at: dict[str, float] = {}

    def admit(self, handler: GuardedHandler, client: str) -> bool:
        """Count the connection in; False when it must be refused. Past its client's cap it
        takes the place of one of that client's evictable connections; past the total cap, of
        a silent connection accepted a second ago or more or of an idle one, else it gets a
        reserved slot (`handler.reserved`)."""
        limits = self.limits
        if self.per_client.get(client, 0) >= limits.max_per_client:
            if not self._evict(client):
                return self._refuse(client, "for this address")
        elif self.total >= limits.max_total - limits.reserved and not (
            self._evict(None, lighter=self.per_client.get(client, 0))
            or self._reserve(handler, client)
        ):
            return self._refuse(client, "in total")
        self.total += 1
        self.per_client[client] = self.per_client.get(client, 0) + 1
        self.silent.add(handler, client)
        return True

    def busy(self, handler: GuardedHandler) -> None:
        """The connection sent a whole request: not one to let go."""
        self.silent.remove(handler)
        self.idle.remove(handler)

    def idle_again(self, handler: GuardedHandler, client: str) -> None:
        """A response is finished and nothing else is queued: evictable, after older ones."""
        self.idle.add(handler, client)

    def release(self, handler: GuardedHandler, client: str) -> None:
        self.busy(handler)
        self.total -= 1
        _less(self.per_client, client)
        if handler.reserved:
            _less(self.reserved_of, client)

    def count(self, reason: str, message: str) -> None:
        self.counts[reason] += 1
        self._count(reason)
        self.warn(reason, message)

    def _evict(self, client: str | None, lighter: int | None = None) -> bool:
        """Close the oldest connection (of `client`, or of anyone) without a request yet, else
        the oldest idle keep-alive one. A connection accepted less than SILENT_GRACE_SECS ago
        (its request may not have been read yet: under a flood of reconnects many are accepted
        in one turn of the loop) goes only for one of its own client's, or, when `lighter` (the
        newcomer's client's count) is given, for a newcomer whose client holds fewer
        connections than its own: an operator gets in among a flood of young connections, and
        the flood's newcomers, as heavy as each other, do not take each other's places."""
        silent = self.silent.oldest(client)
        if silent is not None and silent.age() >= SILENT_GRACE_SECS:
            return self._drop(silent, "evicted_silent", "that sent no request yet")
        idle = self.idle.oldest(client)
        if idle is not None:
            return self._drop(idle, "evicted_idle", "idle between requests")
        if silent is not None and lighter is None:
            return self._drop(silent, "evicted_silent", "that sent no request yet")
        for handler, owner in islice(self.silent.all.items(), HEAVIER_SCAN):
            if lighter is not None and self.per_client.get(owner, 0) > lighter + 1:
                return self._drop(handler, "evicted_silent", "that sent no request yet")
        return False

    def _drop(self, handler: GuardedHandler, reason: str, what: str) -> bool:
        client = self.silent.all.get(handler) or self.idle.all.get(handler, "?")
        self.count(reason, f"evicting a connection from {client} {what}")
        handler.drop()
        handler.release()  # now: a burst of newcomers would otherwise count the evicted too
        return True

    def _reserve(self, handler: GuardedHandler, client: str) -> bool:
        """A reserved slot, one per client at a time: a flood from a few addresses leaves the
        rest to the operator (a slot held by a connection whose request is neither a health
        check nor an admin's is given back as soon as that request is read)."""
        if self.total >= self.limits.max_total or self.reserved_of.get(client, 0):
            return False
        self.reserved_of[client] = 1
        handler.reserved = True
        return True

    def _refuse(self, client: str, where: str) -> bool:
        self.count("refused", f"refusing a connection from {client}: too many connections {where}")
        return False

    def drop_unserved(self) -> None:
        """At shutdown: close connections still in their TLS handshake (aiohttp's server does
        not know them yet)."""
        for handler in list(self.silent.all):
            if not handler.made:
                handler.drop()

    def warn(self, reason: str, message: str) -> None:
        """Log the limit a client hit (each reason at most every 10 s), with the counts."""
        now = time.monotonic()
        if now - self._warned_at.get(reason, -_WARN_EVERY_SECS) >= _WARN_EVERY_SECS:
            self._warned_at[reason] = now
            counts = ", ".join(f"{n} {r.replace('_', ' ')}" for r, n in self.counts.items() if n)
            log.warning("%s (%d open; so far: %s)", message, self.total, counts)


class GuardedHandler(RequestHandler):
    """aiohttp's RequestHandler with admission, a header deadline, eviction and a write
    deadline (the module's docstring says how)."""

    __slots__ = (
        "_accepted_at",
        "_client",
        "_counted",
        "_evictable",
        "_header_timer",
        "_raw",
        "_table",
        "_write_timer",
        "made",
        "reserved",
    )

    def __init__(self, manager: web.Server, table: ConnectionTable, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._table = table
        self._client = ""
        self._header_timer: asyncio.TimerHandle | None = None
        self._write_timer: asyncio.TimerHandle | None = None
        self._raw: asyncio.Transport | None = None  # the TCP transport, under TLS too
        self._accepted_at = 0.0
        self._counted = False
        self._evictable = True  # silent until its first request, idle between requests
        self.made = False  # aiohttp's side of the connection started (after TLS's handshake)
        self.reserved = False  # on a slot kept for health checks and admins

    def admit(self, transport: asyncio.BaseTransport) -> bool:
        """At the accept (before any TLS handshake): count the connection in, or not."""
        peer = transport.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else "unix"
        self._client = client_key(address, self._table.limits.ipv6_prefix)
        self._raw = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._accepted_at = self._loop.time()
        if not self._table.admit(self, self._client):
            return False
        self._counted = True
        return True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not self._counted and not self.admit(transport):
            refused = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
            refused.write(REFUSED)
            refused.close()
            return
        self.made = True
        super().connection_made(transport)
        # this deadline replaces aiohttp's first keep-alive timer; aiohttp arms the idle one
        # after each response. Under TLS it is what the handshake left of it.
        if self._keepalive_handle is not None:
            self._keepalive_handle.cancel()
            self._keepalive_handle = None
        if self._evictable:
            deadline = self._accepted_at + self._table.limits.header_timeout
            self._header_timer = self._loop.call_at(deadline, self._headers_late)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._evictable and self._messages:
            self._request_in()

    def _request_in(self) -> None:
        self._evictable = False
        self._table.busy(self)
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    releases_after_write = True  # the front door leaves the request's token count to us

    def log_access(self, request: Any, response: Any, time: float | None) -> None:
        """Called by aiohttp once a response is finished (written, or its client gone): the
        request's place in its token's count is free (node/web/inflight.py); the connection is
        idle (evictable) unless another request is already queued."""
        release_request(request)
        super().log_access(request, response, time)
        if not self._messages and self._counted and not self._evictable:
            self._evictable = True
            self._table.idle_again(self, self._client)

    def _headers_late(self) -> None:
        self._header_timer = None
        if self._evictable and not self._messages:
            self._table.count(
                "header_timeout", f"closing a connection from {self._client}: no request in time"
            )
            self.drop()

    @property
    def client(self) -> str:
        return self._client

    def age(self) -> float:
        """Seconds since the accept."""
        return self._loop.time() - self._accepted_at

    def drop(self) -> None:
        """Close at once, whatever is buffered (before the TLS handshake too)."""
        self._evictable = False
        transport = self.transport or self._raw
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
            self._table.count(
                "write_timeout", f"dropping a connection from {self._client}: it stopped reading"
            )
            self.drop()

    def handshake_lost(self, exc: BaseException | None) -> None:
        """The TLS layer's connection ended; if the handshake never finished, aiohttp never
        saw it: count why and give the slot back."""
        if self.made or not self._counted:
            return
        if isinstance(exc, ConnectionAbortedError) and self._evictable:
            reason = "handshake_timeout"
        elif exc is not None and self._evictable:
            reason = "handshake_failed"
        else:
            reason = ""  # evicted, or the client went away: counted elsewhere or nothing to say
        if reason:
            what = reason.replace("_", " ")
            self._table.count(reason, f"closing a connection from {self._client}: TLS {what}")
        self.release()

    def connection_lost(self, exc: BaseException | None) -> None:
        self.release()
        if self.made:  # else refused: aiohttp never saw it
            super().connection_lost(exc)

    def release(self) -> None:
        """Give the connection's slot back (once): when it is lost, or at once when it is
        evicted (its close completes a turn of the loop later, and the newcomer that took its
        place is counted now)."""
        if not self._counted:
            return
        self._counted = False
        self._table.release(self, self._client)
        for timer in (self._header_timer, self._write_timer):
            if timer is not None:
                timer.cancel()
        self._header_timer = self._write_timer = None
        self._raw = None


class GuardedServer(web.Server):
    """aiohttp's Server, making GuardedHandlers (behind the admitting TLS layer with TLS)."""

    def __init__(self, server: web.Server, table: ConnectionTable, tls: TlsListener | None) -> None:
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
        self.tls = tls

    def __call__(self) -> Any:
        handler = GuardedHandler(self, self.table, loop=self._loop, **self._kwargs)
        if self.tls is None:
            return handler
        return tls_protocol(self._loop, handler, self.tls, self.table.limits.header_timeout)


class GuardedRunner(web.AppRunner):
    """An AppRunner whose sites accept connections through a ConnectionTable; with `tls`, its
    sites must be plain TCPSites: the TLS layer is made here, after admission."""

    def __init__(
        self,
        app: web.Application,
        limits: ConnectionLimits,
        *,
        tls: TlsListener | None = None,
        count: Callable[[str], None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(app, **kwargs)
        self.table = ConnectionTable(limits, count)
        self.tls = tls

    async def _make_server(self) -> web.Server:
        return GuardedServer(await super()._make_server(), self.table, self.tls)

    async def _cleanup_server(self) -> None:
        self.table.drop_unserved()
        await super()._cleanup_server()


def _less(counts: dict[str, int], key: str) -> None:
    left = counts[key] - 1
    if left:
        counts[key] = left
    else:
        del counts[key]
