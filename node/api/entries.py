"""GET /api/v1/logs, GET and POST /api/v1/findings."""

from __future__ import annotations

import msgspec
from aiohttp import web

from node.context import context_of
from node.placement.key import confirmed
from node.services.findings import NewFinding, post_finding
from node.web.auth import IDENTITY
from node.web.body import json_body
from node.web.http import (
    SINCE,
    int_query,
    json_response,
    limit_param,
    limit_query,
    page_bytes,
)
from node.web.routes import Doc, add_route
from projections.entries import Finding, Findings, LogEntry, Logs


class LogPage(msgspec.Struct):
    next_seq: int
    logs: list[LogEntry]


class FindingPage(msgspec.Struct):
    next_seq: int
    findings: list[Finding]


# the answer's `note` about a name this node does not host (one constant: this is the hot path)
NOT_HOSTED = (
    "no agent of that name is hosted on this node: the finding is kept in the node's own "
    "journal, about that name"
)


class FindingCreated(msgspec.Struct, omit_defaults=True):
    seq: int
    # present when `agent` is not hosted here: where the finding was kept instead
    note: str | None = None


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
    seq, hosted = await post_finding(context_of(request), finding, request[IDENTITY].name)
    if hosted:
        await confirmed(request.app, [finding.agent])
    return json_response(FindingCreated(seq, None if hosted else NOT_HOSTED), status=201)


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
            errors=(400, 409, 503),
            body=NewFinding,
            description="`agent` is any agent name: a hosted agent, the node itself, or "
            "what an external integration reports about (its own name, an agent hosted "
            "elsewhere). A finding about a name this node does not host is kept in the "
            "node's own journal and read back with `agent` as posted; the answer's `note` "
            "says so. The finding records the posting token's name as `posted_by`, apart "
            "from the agent's own findings. About a placed agent (docs/mesh.md, \"Placement "
            "and failover\"), the answer comes once the mesh's stream holds the finding; "
            "503 when it did not within the agent's lease (it may be lost in a failover).",
        ),
    )
