"""The protocol endpoints as an area of the node: A2A JSON-RPC, per-agent cards, AG-UI runs.

Add to node.app's AREAS after the areas whose services these use (tasks, approvals) and
before the runtime (which the AG-UI run looks up when a request comes).
"""

from __future__ import annotations

from aiohttp import web

from node.auth import PUBLIC, add_route
from node.context import CONTEXT
from node.protocols import a2a_jsonrpc, agui_run, lifecycle, openapi_ops
from node.protocols.a2a_service import A2AService
from node.protocols.a2a_view import A2AView
from node.protocols.agui_runs import AguiRuns

A2A_PATH = "/a2a/{agent}"
AGENT_CARD_PATH = "/a2a/{agent}/.well-known/agent-card.json"
AGUI_PATH = "/agui/{agent}"


def setup(app: web.Application) -> None:
    ctx = app[CONTEXT]
    ctx.projections.register(A2AView())
    ctx.services[a2a_jsonrpc.SERVICE] = A2AService(ctx)
    ctx.services[agui_run.SERVICE] = AguiRuns(ctx)
    lifecycle.install(app)
    # read for GetTask/ListTasks/SubscribeToTask; the endpoint asks operate of the rest
    add_route(app, "POST", A2A_PATH, a2a_jsonrpc.a2a_endpoint, ("read", "operate"))
    add_route(app, "GET", AGENT_CARD_PATH, a2a_jsonrpc.get_agent_card, PUBLIC)
    add_route(app, "POST", AGUI_PATH, agui_run.agui_run, "operate")
    openapi_ops.register()
