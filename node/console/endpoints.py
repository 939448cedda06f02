"""Read endpoints the console needs that the spec does not define: who the token is, the
history of approval decisions, and one overview of the mesh. Each is an ordinary /api/v1
route with a scope, so the CLI and scripts can use them too."""

from __future__ import annotations

from typing import Literal

import msgspec
from aiohttp import web

from node.context import NodeContext, context_of
from node.sync.convergence import Convergence, convergence_report
from node.web.auth import IDENTITY
from node.web.http import int_query, json_response, limit_param, limit_query
from node.web.pages import CURSOR, PAGED, page_response
from node.web.routes import Doc, add_route
from projections.approvals import Approvals, Resolution
from projections.catalogue import FINDING
from projections.entries import Finding, Findings
from projections.journals import Journals
from projections.peers import PeerBook

WHOAMI_PATH = "/api/v1/auth/whoami"
HISTORY_PATH = "/api/v1/approvals/history"
MESH_PATH = "/api/v1/mesh"
HISTORY_DEFAULT = 100
RECENT_INCIDENTS = 20
RECENT_WINDOW = 1000


class WhoAmI(msgspec.Struct):
    name: str
    scopes: list[str]


class MeshPeer(msgspec.Struct):
    name: str
    url: str
    public_key: str | None
    key_source: Literal["pinned", "config"] | None


class Mesh(msgspec.Struct):
    node: str
    peers: list[MeshPeer]
    journals: list[Convergence]
    incidents: list[Finding]


async def whoami(request: web.Request) -> web.Response:
    """So a client can hide what its token may not do; the server still enforces every call."""
    identity = request[IDENTITY]
    return json_response(WhoAmI(identity.name, sorted(identity.scopes)))


async def approval_history(request: web.Request) -> web.Response:
    """Resolved requests, newest first: the read model keeps them in the order they resolved."""
    limit = limit_query(request, HISTORY_DEFAULT)
    start = int_query(request, "cursor", 0)
    return page_response(
        request, context_of(request).projections.get(Approvals).history(start + limit)
    )


async def mesh(request: web.Request) -> web.Response:
    return json_response(mesh_overview(context_of(request)))


def mesh_overview(ctx: NodeContext) -> Mesh:
    """Peers with the key each is known by, replication per journal, and the sync incidents
    (equivocation, changed keys) this node journaled as findings in its own journal."""
    pins = ctx.projections.get(PeerBook).pins
    peers = [
        MeshPeer(
            peer.name,
            peer.url,
            pins.get(peer.name) or peer.public_key,
            "pinned" if peer.name in pins else "config" if peer.public_key else None,
        )
        for peer in ctx.config.peers
    ]
    heads = ctx.projections.get(Journals).head
    journals = [convergence_report(ctx, name) for name in sorted(heads) if not name.startswith("$")]
    return Mesh(ctx.name, peers, journals, own_findings(ctx, RECENT_INCIDENTS))


def own_findings(ctx: NodeContext, limit: int) -> list[Finding]:
    """This node's newest findings, newest first: from the last RECENT_WINDOW envelopes of its
    own journal (its findings, key rotations and reloads), so the read is bounded."""
    head = ctx.projections.get(Journals).head.get(ctx.name, 0)
    recent = ctx.store.read_stream(ctx.name, max(head - RECENT_WINDOW, 0), RECENT_WINDOW)
    findings = ctx.projections.get(Findings)
    own = (
        findings.at(e.position)
        for e in reversed(recent)
        if e.event.type == FINDING and "subject" not in e.event.data  # not one posted about X
    )
    return [f for f in own if f is not None][:limit]


def setup(app: web.Application) -> None:
    add_route(
        app,
        "GET",
        WHOAMI_PATH,
        whoami,
        "read",
        Doc(
            "The calling token's name and scopes",
            "auth",
            WhoAmI,
            description="Lets a client (the console) hide actions its token may not take.",
        ),
    )
    add_route(
        app,
        "GET",
        HISTORY_PATH,
        approval_history,
        "read",
        Doc(
            "Resolved approval requests, newest first",
            "approvals",
            list[Resolution],
            errors=(400,),
            query=(limit_param(HISTORY_DEFAULT), CURSOR),
            description="`outcome` is approve, deny or timeout; `operator` is who decided. "
            + PAGED,
        ),
    )
    add_route(
        app,
        "GET",
        MESH_PATH,
        mesh,
        "read",
        Doc(
            "Peers, their keys, replication per journal and recent sync incidents",
            "sync",
            Mesh,
        ),
    )
