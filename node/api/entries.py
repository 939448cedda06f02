"""GET /api/v1/logs, GET and POST /api/v1/findings."""

from __future__ import annotations

import msgspec
from aiohttp import web

from node.auth import add_route
from node.context import context_of
from node.http import int_query, json_body, json_response, limit_query
from node.services.findings import NewFinding, report_finding
from projections.entries import Findings, Logs


async def list_logs(request: web.Request) -> web.Response:
    since = int_query(request, "since", 0)
    limit = limit_query(request, 100)
    next_seq, logs = context_of(request).projections.get(Logs).page(since, limit)
    return json_response({"next_seq": next_seq, "logs": msgspec.to_builtins(logs)})


async def list_findings(request: web.Request) -> web.Response:
    since = int_query(request, "since", 0)
    limit = limit_query(request, 50)
    next_seq, findings = context_of(request).projections.get(Findings).page(since, limit)
    return json_response({"next_seq": next_seq, "findings": msgspec.to_builtins(findings)})


async def post_finding(request: web.Request) -> web.Response:
    finding = await json_body(request, NewFinding)
    seq = await report_finding(context_of(request), finding)
    return json_response({"seq": seq}, status=201)


def setup(app: web.Application) -> None:
    add_route(app, "GET", "/api/v1/logs", list_logs, "read")
    add_route(app, "GET", "/api/v1/findings", list_findings, "read")
    add_route(app, "POST", "/api/v1/findings", post_finding, "operate")
