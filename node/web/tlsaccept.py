"""TLS on the node's listener, with admission at the accept: a connection is counted (and may be
refused) before its handshake, and the handshake shares the connection's header deadline.

`loop.create_server(..., ssl=context)` hands the app's protocol a connection only once its
handshake is done; until then no cap applies, and the only deadline is the loop's handshake
timeout (60 s): plain TCP connects that never send a ClientHello took a node to its fd limit
(issue 45). So the listener is plain TCP, and each accepted connection gets the loop's own TLS
protocol (what create_server would have made: asyncio's `sslproto.SSLProtocol` or uvloop's
`SSLProtocol`, which take the same arguments), subclassed to ask the connection table first.
The handler behind it sees the connection after the handshake, as before.

The context is read from a `TlsListener` at each accept, so a reload swaps in a new one
(`node/config/reload.py`) without touching the context connections already use.
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import ssl
from functools import cache
from typing import Protocol, cast


class Admitted(Protocol):
    """What the TLS layer needs of the HTTP protocol behind it (connections.GuardedHandler):
    admission at the accept, and the news of a connection lost before its handshake ended."""

    def admit(self, transport: asyncio.BaseTransport) -> bool: ...

    def handshake_lost(self, exc: BaseException | None) -> None: ...


class TlsListener:
    """The listener's SSLContext, replaced as a whole by a certificate reload."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self.context = context


def tls_protocol(
    loop: asyncio.AbstractEventLoop,
    handler: Admitted,
    listener: TlsListener,
    handshake_timeout: float,
) -> asyncio.BaseProtocol:
    """The protocol for one accepted connection: TLS in front of `handler`."""
    admitting = _admitting(_loop_tls_protocol(loop))
    protocol: asyncio.BaseProtocol = admitting(loop, handler, listener.context, handshake_timeout)
    return protocol


def _loop_tls_protocol(loop: asyncio.AbstractEventLoop) -> type:
    """The TLS protocol class `loop` itself uses for create_server(ssl=...)."""
    if type(loop).__module__.startswith("uvloop"):
        import uvloop.loop

        return uvloop.loop.SSLProtocol  # type: ignore[attr-defined, no-any-return]
    return asyncio.sslproto.SSLProtocol


@cache
def _admitting(base: type) -> type:
    """`base` with admission at `connection_made` (the accept) and the slot given back when the
    connection ends before its handshake finished."""

    class AdmittingTls(base):  # type: ignore[misc]
        def __init__(
            self,
            loop: asyncio.AbstractEventLoop,
            handler: Admitted,
            context: ssl.SSLContext,
            handshake_timeout: float,
        ) -> None:
            super().__init__(
                loop, handler, context, None, server_side=True,
                ssl_handshake_timeout=handshake_timeout,
            )  # fmt: skip
            self.guarded = handler
            self.refused = False

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            if not self.guarded.admit(transport):
                self.refused = True  # no HTTP before a handshake: the client sees a reset
                cast(asyncio.Transport, transport).abort()
                return
            super().connection_made(transport)

        def connection_lost(self, exc: BaseException | None) -> None:
            if self.refused:
                return  # never started: nothing of the TLS layer to close
            super().connection_lost(exc)
            self.guarded.handshake_lost(exc)

    return AdmittingTls
