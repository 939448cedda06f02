"""Approvals: GET the pending list and its groups, POST a decision singly or in a batch."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

import msgspec
from aiohttp import web

from node.api.params import json_body, json_response
from node.auth import IDENTITY, add_route
from node.context import CONTEXT, context_of
from node.services.approvals import ApprovalGate, Decision
from projections.approvals import Approvals

ApprovalId = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]


RequestHash = Annotated[str, msgspec.Meta(pattern=r"^sha256:[0-9a-f]{64}$(?!\n)")]


class DecisionBody(msgspec.Struct, forbid_unknown_fields=True):
    decision: Decision
    # optional: decide only if the request is still exactly the one the operator read (409)
    request_hash: RequestHash | None = None


class BatchBody(msgspec.Struct, forbid_unknown_fields=True):
    ids: Annotated[list[ApprovalId], msgspec.Meta(max_length=10_000)]
    decision: Decision


def gate_of(request: web.Request) -> ApprovalGate:
    return context_of(request).services["approvals"]


async def list_approvals(request: web.Request) -> web.Response:
    return json_response(gate_of(request).projection.list())


async def list_batched(request: web.Request) -> web.Response:
    return json_response({"groups": gate_of(request).projection.groups()})


async def decide(request: web.Request) -> web.Response:
    body = await json_body(request, DecisionBody)
    result = await gate_of(request).decide(
        request.match_info["approval_id"],
        body.decision,
        request[IDENTITY].name,
        request_hash=body.request_hash,
    )
    return json_response(result)


async def decide_batch(request: web.Request) -> web.Response:
    body = await json_body(request, BatchBody)
    result = await gate_of(request).decide_batch(body.ids, body.decision, request[IDENTITY].name)
    return json_response(result)


async def lifecycle(app: web.Application) -> AsyncIterator[None]:
    gate = app[CONTEXT].services["approvals"]
    await gate.start()
    yield
    await gate.close()


def setup(app: web.Application) -> None:
    ctx = app[CONTEXT]
    projection = Approvals()
    ctx.projections.register(projection)
    ctx.services["approvals"] = ApprovalGate(ctx)
    ctx.metrics.approvals_pending.set_function(lambda: projection.count)
    app.cleanup_ctx.append(lifecycle)
    add_route(app, "GET", "/api/v1/approvals", list_approvals, "read")
    add_route(app, "GET", "/api/v1/approvals/batched", list_batched, "read")
    # before /{approval_id}, which would otherwise take "batch" for an id
    add_route(app, "POST", "/api/v1/approvals/batch", decide_batch, "operate")
    add_route(app, "POST", "/api/v1/approvals/{approval_id}", decide, "operate")
