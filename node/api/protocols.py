"""The protocol endpoints as an area of the node: A2A JSON-RPC, per-agent cards, AG-UI runs.

Comes after the areas whose services these use: tasks, approvals and the runtime's agents.
"""

from __future__ import annotations

from aiohttp import web

from node.auth import PUBLIC, add_route
from node.context import CONTEXT
from node.protocols import a2a_jsonrpc, agui_run, lifecycle, openapi_ops
from node.protocols.a2a_service import A2A, A2AService
from node.protocols.agui_runs import AGUI_RUNS, AguiRuns
from node.runtime.agents import AGENTS
from node.services.approvals import APPROVALS
from node.services.tasks import TASKS
from projections.a2a import A2AView

A2A_PATH = "/a2a/{agent}"
AGENT_CARD_PATH = "/a2a/{agent}/.well-known/agent-card.json"
AGUI_PATH = "/agui/{agent}"


def setup(app: web.Application) -> None:
    ctx = app[CONTEXT]
    ctx.projections.register(A2AView())
    app[A2A] = A2AService(ctx, app[TASKS], app[APPROVALS])
    app[AGUI_RUNS] = AguiRuns(ctx, app[TASKS], app[APPROVALS], app[AGENTS])
    lifecycle.install(app)
    # read for GetTask/ListTasks/SubscribeToTask; the endpoint asks operate of the rest
    add_route(app, "POST", A2A_PATH, a2a_jsonrpc.a2a_endpoint, ("read", "operate"))
    add_route(app, "GET", AGENT_CARD_PATH, a2a_jsonrpc.get_agent_card, PUBLIC)
    add_route(app, "POST", AGUI_PATH, agui_run.agui_run, "operate")
    openapi_ops.register()
