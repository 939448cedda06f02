"""Serve the app until SIGTERM/SIGINT; then 503 on health, drain, finish appends, exit 0."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

from aiohttp import web

from eventstore.signing import SIGNER
from node.api.console import CONSOLE_PATH
from node.app import build_app
from node.config.model import Config, listen_address
from node.config.reload import Reloader
from node.context import CONTEXT
from node.ops.eventloop import loop_name
from node.ops.heap import settle_after_start
from node.ops.logsetup import AccessLogger, ProtocolLogger, Redactor, access_logger
from node.runtime.agents import log_agents_starting
from node.runtime.engine_settings import compiler
from node.web.connections import ConnectionLimits, GuardedRunner
from node.web.tls import SERVER_TLS, server_context
from node.web.tlsaccept import TlsListener

log = logging.getLogger("agent-node")
LISTEN_BACKLOG = 1024
LINGER_SECS = 1.0


async def serve(
    config: Config,
    *,
    access_log: bool = False,
    redactor: Redactor | None = None,
    config_path: Path | None = None,
) -> None:
    app = build_app(config)
    context = server_context(config)  # None: plain HTTP (node/web/tls.py)
    tls = TlsListener(context) if context is not None else None
    if tls is not None:
        app[SERVER_TLS] = tls  # SIGHUP swaps a renewed certificate's context in
    runner = GuardedRunner(
        app,
        ConnectionLimits.of(config),
        tls=tls,  # made after admission, per connection (node/web/tlsaccept.py)
        count=app[CONTEXT].metrics.count_connection,
        keepalive_timeout=config.node.keepalive_timeout_secs,
        # after answering a request whose body it did not read (a refusal), aiohttp reads the
        # rest for so long, so the client can read the answer before the close; at its 10 s a
        # trickled body held its slot that long (3,600 such connections held 150 MB)
        lingering_time=LINGER_SECS,
        handle_signals=False,
        access_log=access_logger(access_log),
        access_log_class=AccessLogger,
        logger=ProtocolLogger(app[CONTEXT].metrics.count_malformed),  # one WARNING, no traceback
        shutdown_timeout=30,
    )
    await runner.setup()
    host, port = listen_address(config)
    # plain TCP: the runner adds TLS after admission. A backlog of LISTEN_BACKLOG (the kernel
    # caps it at net.core.somaxconn): at aiohttp's 128 a burst of connects overflowed the
    # queue and a client's SYN waited for its retransmission, a second later (issue 45)
    site = web.TCPSite(runner, host, port, backlog=LISTEN_BACKLOG)
    try:
        await site.start()
    except OSError:  # the address is taken, say: stop what started (the CLI says why)
        await runner.cleanup()
        raise
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if (
        config_path is not None
    ):  # tokens and secrets again, without a restart (node/config/reload.py)
        loop.add_signal_handler(signal.SIGHUP, Reloader(app, config_path, redactor).trigger)
    scheme = "https" if tls else "http"
    log.info("node %s listening on %s://%s:%d", config.node.name, scheme, host, port)
    log.info(
        "journal signer: %s; event loop: %s; wasm compiler: %s", SIGNER, loop_name(loop), compiler()
    )
    settle_after_start()
    log.info("ready: the operator console is at %s%s", config.public_url, CONSOLE_PATH)
    log_agents_starting(app)  # which agents are still compiling (node/runtime/startup.py)
    try:
        await stop.wait()
    finally:
        app[CONTEXT].shutting_down = True
        log.info(
            "shutting down: health answers 503, draining for %ss", config.node.shutdown_drain_secs
        )
        await asyncio.sleep(config.node.shutdown_drain_secs)
        await runner.cleanup()
        log.info("stopped cleanly")
