"""The route table: every route with who may call it and what it takes and returns.

Declared where the route is added (`add_route(..., doc=Doc(...))`), read by the auth
middleware (the scopes) and by the OpenAPI document (everything else), so a route cannot
exist undocumented or be documented without existing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

Scopes = tuple[str, ...]
PUBLIC: Scopes = ()
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Query:
    """One query parameter; `schema` is a type msgspec can describe or a JSON schema."""

    name: str
    schema: Any
    description: str
    required: bool = False


@dataclass(frozen=True)
class Doc:
    """What an operation does. `returns` is the type of its JSON success body (a msgspec
    Struct, `list[...]` of one, ...), `body` the type of its JSON request body; an operation
    whose success is not JSON gives `content` ({media type: JSON schema}) instead, one whose
    request is not JSON `body_content`. `errors` are the problem+json statuses it answers
    besides 401/403 (which every protected route has)."""

    summary: str
    tag: str
    returns: Any = None
    status: int = 200
    content: dict[str, Any] | None = None
    errors: tuple[int, ...] = ()
    query: tuple[Query, ...] = ()
    body: Any = None
    body_content: dict[str, Any] | None = None
    description: str = ""
    # further responses by status, each {media type: JSON schema} or None for no body
    extra: dict[int, dict[str, Any] | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Route:
    scopes: Scopes
    doc: Doc


ROUTES: web.AppKey[dict[web.AbstractRoute, Route]] = web.AppKey("routes", dict)


def add_route(
    app: web.Application,
    method: str,
    path: str,
    handler: Handler,
    scopes: Scopes | str,
    doc: Doc,
) -> web.AbstractRoute:
    """Every route states who may call it (PUBLIC, or scopes any of which will do) and what
    it does."""
    route = app.router.add_route(method, path, handler)
    routes = app.setdefault(ROUTES, {})
    routes[route] = Route((scopes,) if isinstance(scopes, str) else scopes, doc)
    return route


def scopes_of(app: web.Application, route: web.AbstractRoute) -> Scopes | None:
    entry = app.get(ROUTES, {}).get(route)
    return entry.scopes if entry is not None else None
