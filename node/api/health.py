"""GET /api/v1/health (public) and GET /api/v1/metrics."""

from __future__ import annotations

from aiohttp import web

from node.auth import PUBLIC, add_route
from node.context import context_of
from node.http import json_response


async def health(request: web.Request) -> web.Response:
    if context_of(request).shutting_down:
        return json_response({"status": "shutting_down"}, status=503)
    return json_response({"status": "ok"})


async def metrics(request: web.Request) -> web.Response:
    body = context_of(request).metrics.render()
    return web.Response(
        body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}
    )


def setup(app: web.Application) -> None:
    add_route(app, "GET", "/api/v1/health", health, PUBLIC)
    add_route(app, "GET", "/api/v1/metrics", metrics, "read")
