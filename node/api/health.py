"""GET /api/v1/health (public) and GET /api/v1/metrics."""

from __future__ import annotations

from typing import Literal

import msgspec
from aiohttp import web

from node.context import context_of
from node.web.http import json_response
from node.web.routes import PUBLIC, Doc, add_route

PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


class Health(msgspec.Struct):
    status: Literal["ok", "shutting_down"]


async def health(request: web.Request) -> web.Response:
    if context_of(request).shutting_down:
        return json_response(Health("shutting_down"), status=503)
    return json_response(Health("ok"))


async def metrics(request: web.Request) -> web.Response:
    body = context_of(request).metrics.render()
    return web.Response(body=body, headers={"Content-Type": PROMETHEUS_TEXT})


def setup(app: web.Application) -> None:
    add_route(
        app,
        "GET",
        "/api/v1/health",
        health,
        PUBLIC,
        Doc(
            "Liveness",
            "health",
            Health,
            extra={503: {"application/json": Health}},
            description="503 with `shutting_down` from the moment shutdown starts.",
        ),
    )
    add_route(
        app,
        "GET",
        "/api/v1/metrics",
        metrics,
        "read",
        Doc(
            "Metrics in the Prometheus text format",
            "health",
            content={"text/plain": {"type": "string"}},
        ),
    )
