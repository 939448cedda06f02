"""Read endpoints the console needs that the spec does not define: who the token is, the
history of approval decisions, and one overview of the mesh. Each is an ordinary /api/v1
route with a scope, so the CLI and scripts can use them too."""

from __future__ import annotations

from itertools import islice
from typing import Any

import msgspec
from aiohttp import web

from node.api.params import json_response, limit_query
from node.auth import IDENTITY, add_route
from node.context import NodeContext, context_of
from node.sync.convergence import convergence_report

WHOAMI_PATH = "/api/v1/auth/whoami"
HISTORY_PATH = "/api/v1/approvals/history"
MESH_PATH = "/api/v1/mesh"
HISTORY_DEFAULT = 100
RECENT_INCIDENTS = 20


async def whoami(request: web.Request) -> web.Response:
    """So a client can hide what its token may not do; the server still enforces every call."""
    identity = request[IDENTITY]
    return json_response({"name": identity.name, "scopes": sorted(identity.scopes)})


async def approval_history(request: web.Request) -> web.Response:
    """Resolved requests, newest first: the read model keeps them in the order they resolved."""
    limit = limit_query(request, HISTORY_DEFAULT)
    resolved = context_of(request).projections["approvals"].resolved
    return json_response(list(islice(reversed(resolved.values()), limit)))


async def mesh(request: web.Request) -> web.Response:
    return json_response(mesh_overview(context_of(request)))


def mesh_overview(ctx: NodeContext) -> dict[str, Any]:
    """Peers with the key each is known by, replication per journal, and the sync incidents
    (equivocation, changed keys) this node journaled as findings in its own journal."""
    pins = ctx.projections["peers"].pins
    peers = [
        {
            "name": peer.name,
            "url": peer.url,
            "public_key": pins.get(peer.name) or peer.public_key,
            "key_source": "pinned" if peer.name in pins else "config" if peer.public_key else None,
        }
        for peer in ctx.config.peers
    ]
    heads = ctx.projections["journals"].head
    journals = [convergence_report(ctx, name) for name in sorted(heads) if not name.startswith("$")]
    findings = ctx.projections["findings"].entries
    own = (f for f in reversed(findings) if f.agent == ctx.name)
    incidents = msgspec.to_builtins(list(islice(own, RECENT_INCIDENTS)))
    return {"node": ctx.name, "peers": peers, "journals": journals, "incidents": incidents}


def setup(app: web.Application) -> None:
    add_route(app, "GET", WHOAMI_PATH, whoami, "read")
    add_route(app, "GET", HISTORY_PATH, approval_history, "read")
    add_route(app, "GET", MESH_PATH, mesh, "read")
