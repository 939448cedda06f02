"""GET /api/v1/logs, GET and POST /api/v1/findings."""

from __future__ import annotations

import msgspec
from aiohttp import web

from node.auth import IDENTITY
from node.context import context_of
from node.http import (
    SINCE,
    int_query,
    json_body,
    json_response,
    limit_param,
    limit_query,
    page_bytes,
)
from node.routes import Doc, add_route
from node.services.findings import NewFinding, post_finding
from projections.entries import Finding, Findings, LogEntry, Logs


class LogPage(msgspec.Struct):
    next_seq: int
    logs: list[LogEntry]


class FindingPage(msgspec.Struct):
    next_seq: int
    findings: list[Finding]


class FindingCreated(msgspec.Struct):
    seq: int


async def list_logs(request: web.Request) -> web.Response:
    since = int_query(request, "since", 0)
    limit = limit_query(request, 100)
    ctx = context_of(request)
    next_seq, logs = ctx.projections.get(Logs).page(since, limit, page_bytes(ctx))
    return json_response(LogPage(next_seq, logs))


async def list_findings(request: web.Request) -> web.Response:
    since = int_query(request, "since", 0)
    limit = limit_query(request, 50)
    ctx = context_of(request)
    next_seq, findings = ctx.projections.get(Findings).page(since, limit, page_bytes(ctx))
    return json_response(FindingPage(next_seq, findings))


async def create_finding(request: web.Request) -> web.Response:
    finding = await json_body(request, NewFinding)
    seq = await post_finding(context_of(request), finding, request[IDENTITY].name)
    return json_response(FindingCreated(seq), status=201)


def setup(app: web.Application) -> None:
    add_route(
        app,
        "GET",
        "/api/v1/logs",
        list_logs,
        "read",
        Doc(
            "Log entries after a seq",
            "logs",
            LogPage,
            errors=(400,),
            query=(SINCE, limit_param(100)),
        ),
    )
    add_route(
        app,
        "GET",
        "/api/v1/findings",
        list_findings,
        "read",
        Doc(
            "Findings after a seq",
            "logs",
            FindingPage,
            errors=(400,),
            query=(SINCE, limit_param(50)),
        ),
    )
    add_route(
        app,
        "POST",
        "/api/v1/findings",
        create_finding,
        "operate",
        Doc(
            "Report a finding",
            "logs",
            FindingCreated,
            status=201,
            errors=(400, 404, 409),
            body=NewFinding,
            description="`agent` names a hosted agent, a journal the node has, the node "
            "itself, or the posting token's own name (a scanner reporting under its name); "
            "another name is 404 (no new journal). The finding records the posting "
            "token's name as `posted_by`, apart from the agent's own findings.",
        ),
    )
