"""Secrets-broker grants: GET the list, POST revoke and restore of one (agent, domain)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Literal

import msgspec
from aiohttp import web

from node.context import CONTEXT
from node.placement.key import confirmed
from node.services.grants import GRANTS, GrantService
from node.web.auth import IDENTITY
from node.web.http import json_response
from node.web.routes import Doc, add_route
from projections.grants import Grant


class GrantChange(msgspec.Struct):
    agent: str
    domain: str
    status: Literal["active", "revoked"]


def grants_of(request: web.Request) -> GrantService:
    return request.app[GRANTS]


async def list_grants(request: web.Request) -> web.Response:
    return json_response(grants_of(request).projection.list())


async def revoke(request: web.Request) -> web.Response:
    agent, domain = request.match_info["agent"], request.match_info["domain"]
    operator = request[IDENTITY].name
    revoked = await grants_of(request).revoke(agent, domain, operator)
    await confirmed(request.app, [agent])
    return json_response(revoked)


async def restore(request: web.Request) -> web.Response:
    agent, domain = request.match_info["agent"], request.match_info["domain"]
    restored = await grants_of(request).restore(agent, domain)
    await confirmed(request.app, [agent])
    return json_response(restored)


async def lifecycle(app: web.Application) -> AsyncIterator[None]:
    """Grant what the config grants (and revoke what it dropped) before any agent can ask for
    a secret."""
    await app[GRANTS].follow_configured()
    yield


def setup(app: web.Application) -> None:
    ctx = app[CONTEXT]
    app[GRANTS] = GrantService(ctx)
    app.cleanup_ctx.append(lifecycle)
    add_route(
        app,
        "GET",
        "/api/v1/broker/grants",
        list_grants,
        "read",
        Doc("Secrets-broker grants", "grants", list[Grant]),
    )
    add_route(
        app,
        "POST",
        "/api/v1/broker/grants/{agent}/{domain}/revoke",
        revoke,
        "operate",
        Doc("Revoke an active grant", "grants", GrantChange, errors=(404, 409)),
    )
    add_route(
        app,
        "POST",
        "/api/v1/broker/grants/{agent}/{domain}/restore",
        restore,
        "operate",
        Doc("Restore a revoked grant", "grants", GrantChange, errors=(404, 409)),
    )
