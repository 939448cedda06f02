"""The aiohttp application: context, middlewares, the journal's lifecycle, and every API area."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator

from aiohttp import web
from nacl.signing import SigningKey

from eventstore.keys import load_or_create_key
from eventstore.store import EventStore
from node import checkpoint, logsetup, progress
from node.api import a2a, approvals, discovery, entries, grants, health, openapi, registry
from node.auth import ROUTE_SCOPES, TOKENS, TokenTable, auth_middleware
from node.config import Config
from node.context import CONTEXT, NodeContext
from node.errors import problem_middleware
from node.metrics import NodeMetrics
from node.protocols import area as protocols
from node.runtime import area as runtime_area
from node.streams import api as streams
from node.sync import api as sync
from projections.base import Projections
from projections.entries import Findings, Logs
from projections.journals import Journals
from projections.keys import KeyHistory

log = logging.getLogger(__name__)
JOURNAL_DIR = "journal"
# Each area module adds its routes (and, if it has any, projections and lifecycle).
AREAS = (
    health,
    entries,
    approvals,
    registry,
    grants,  # before the runtime: configured grants exist before an agent asks for a secret
    discovery,
    streams,
    a2a,  # after streams: its own GET /api/v1/a2a/events is only a fallback
    sync,
    protocols,  # A2A JSON-RPC and AG-UI runs: uses tasks and approvals
    runtime_area,  # last: its agents stop first, before the services they call close
    openapi,  # after every route exists: the document is built from the router
)


def open_store(config: Config, key: SigningKey) -> EventStore:
    return EventStore(
        config.data_path / JOURNAL_DIR,
        key,
        config.node.name,
        map_size=config.node.map_size_mb << 20,
    )


def core_projections() -> Projections:
    return Projections([Journals(), Logs(), Findings(), KeyHistory()])


def build_app(config: Config, *, key: SigningKey | None = None) -> web.Application:
    config.data_path.mkdir(parents=True, exist_ok=True)
    key = key or load_or_create_key(config.data_path)
    ctx = NodeContext(
        config=config,
        key=key,
        store=open_store(config, key),
        projections=core_projections(),
        metrics=NodeMetrics(a.name for a in config.agents),
    )
    app = web.Application(
        middlewares=[timing_middleware, problem_middleware, auth_middleware],
        client_max_size=config.node.max_body_kb * 1024,
    )
    logsetup.install(app)  # request ids, log context
    app[CONTEXT] = ctx
    app[TOKENS] = TokenTable(config.auth)
    app[ROUTE_SCOPES] = {}
    app.cleanup_ctx.append(journal_lifecycle)
    for area in AREAS:
        area.setup(app)
    return app


async def journal_lifecycle(app: web.Application) -> AsyncIterator[None]:
    """Rebuild every read model from the journal, then fold live commits as they land."""
    ctx = app[CONTEXT]
    if checkpoint.restore(ctx.projections, ctx.store, ctx.config.data_path):
        log.info("projections restored from checkpoint at position %d", ctx.projections.position)
    after = ctx.projections.position
    pending = ctx.store.last_position - after
    ctx.projections.rebuild(progress.chunks(ctx.store.iter_chunks(after), pending, "rebuild"))
    ctx.store.add_commit_listener(ctx.projections.apply)
    ctx.store.start()
    yield
    await ctx.store.close()
    checkpoint.save(ctx.projections, ctx.config.data_path)


@web.middleware
async def timing_middleware(request: web.Request, handler) -> web.StreamResponse:
    started = time.perf_counter()
    response = await handler(request)
    if response.content_type != "text/event-stream":
        request.app[CONTEXT].metrics.request_duration.observe(time.perf_counter() - started)
    return response
