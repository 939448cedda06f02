"""The aiohttp application: context, middlewares, the journal's lifecycle, and every API area."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from aiohttp import web
from nacl.signing import SigningKey

from eventstore.keys import load_or_create_key
from eventstore.store import EventStore
from node.api import (
    a2a,
    agents,
    approvals,
    conformance,
    console,
    delivery,
    discovery,
    entries,
    grants,
    health,
    openapi,
    protocols,
    registry,
    runtime,
    streams,
    sync,
    usage,
)
from node.cli import progress
from node.config.model import Config
from node.context import CONTEXT, NodeContext
from node.ops import checkpoint
from node.ops.faults import FaultReporter
from node.ops.metrics import NodeMetrics
from node.web import inflight
from node.web.auth import TOKENS, TokenTable
from node.web.frontdoor import front_door
from projections.base import Projections
from projections.disk import DiskModels
from projections.models import disk_models, node_projections

log = logging.getLogger(__name__)
JOURNAL_DIR = "journal"
# The areas (docs/design.md, "Wiring"): each `setup(app)` registers its read models, its
# service under its AppKey, its lifecycle and its routes. An area comes after every area whose
# service it takes in its setup; lifecycles start in this order and stop in reverse.
AREAS = (
    health,
    entries,
    approvals,
    registry,
    grants,
    streams,
    a2a,
    sync,
    discovery,
    usage,  # GET /api/v1/usage: inference usage (issue 54)
    console,  # the operator console at /console/ and the read endpoints it needs
    delivery,  # the outbox (A2A push, approval notifications): stops after the runtime
    runtime,  # takes approvals, registry, grants, the bus and tasks; its agents stop first
    agents,  # deploy, upgrade, roll back, stop, start, remove: the runtime's deployments
    protocols,  # takes tasks, approvals and the runtime's agents
    openapi,  # after every route exists: the document is built from the router
)


def open_store(config: Config, key: SigningKey) -> EventStore:
    """The journal as the node opens it, with the on-disk read models attached."""
    return EventStore(
        config.data_path / JOURNAL_DIR,
        key,
        config.node.name,
        map_size=config.node.map_size_mb << 20,
        indexer=disk_models(),
    )


def core_projections(store: EventStore) -> Projections:
    """Every read model (projections/models.py): in memory, and the store's on disk."""
    disk = store.indexer
    assert isinstance(disk, DiskModels)  # open_store attached them
    return node_projections(disk)


def build_app(config: Config, *, key: SigningKey | None = None) -> web.Application:
    config.data_path.mkdir(parents=True, exist_ok=True)
    key = key or load_or_create_key(config.data_path)
    store = open_store(config, key)
    ctx = NodeContext(
        config=config,
        key=key,
        store=store,
        projections=core_projections(store),
        metrics=NodeMetrics(a.name for a in config.agents),
    )
    app = web.Application(
        middlewares=[front_door],
        client_max_size=config.node.max_body_kb * 1024,
    )
    app[CONTEXT] = ctx
    app[TOKENS] = TokenTable(config.auth)
    inflight.install(app, config.node, ctx.metrics)
    app.cleanup_ctx.append(journal_lifecycle)
    for area in AREAS:
        area.setup(app)
    conformance.install(app)
    return app


async def journal_lifecycle(app: web.Application) -> AsyncIterator[None]:
    """Bring every read model up to the journal, then fold live commits as they land.

    The on-disk ones are as far as the journal already, unless this data dir predates them
    or their code changed (then they are folded here, with a progress bar); the in-memory
    ones fold what came after their checkpoint."""
    ctx = app[CONTEXT]
    faults = FaultReporter(ctx)
    faults.attach()  # a read model that raises on an envelope never stops the rebuild
    ctx.store.catch_up_index(lambda chunks, total: progress.chunks(chunks, total, "read models"))
    if checkpoint.restore(ctx.projections, ctx.store, ctx.config.data_path):
        log.info("projections restored from checkpoint at position %d", ctx.projections.position)
    after = ctx.projections.position
    pending = ctx.store.last_position - after
    ctx.projections.rebuild(progress.chunks(ctx.store.iter_chunks(after), pending, "rebuild"))
    ctx.store.add_commit_listener(ctx.projections.apply)
    ctx.store.add_rewind_listener(lambda _s, _r: ctx.projections.refold(ctx.store.iter_chunks()))
    ctx.store.start()
    faults.start()
    node = ctx.config.node
    checkpoints = checkpoint.Periodic(
        ctx.projections,
        ctx.config.data_path,
        every_events=node.checkpoint_events,
        every_secs=node.checkpoint_secs,
    )
    checkpoints.start()
    yield
    await checkpoints.stop()
    await faults.stop()
    await ctx.store.close()
    checkpoint.save(ctx.projections, ctx.config.data_path)
