"""The protocol endpoints as an area of the node: A2A JSON-RPC, per-agent cards, AG-UI runs.

Comes after the areas whose services these use: tasks, approvals and the runtime's agents.
"""

from __future__ import annotations

from aiohttp import web

from node.agui import run as agui_run
from node.agui.runs import AGUI_RUNS, AguiRuns
from node.context import CONTEXT
from node.protocols import a2a_jsonrpc, lifecycle
from node.protocols.a2a_service import A2A, A2AService
from node.runtime.agents import AGENTS
from node.services.approvals import APPROVALS
from node.services.tasks import TASKS
from node.streams.sse import sse_content
from node.web import jsonrpc as rpc
from node.web.routes import PUBLIC, Doc, add_route

A2A_PATH = "/a2a/{agent}"
AGENT_CARD_PATH = "/a2a/{agent}/.well-known/agent-card.json"
AGUI_PATH = "/agui/{agent}"
AGENT_CARD_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "supportedInterfaces": {"type": "array", "items": {"type": "object"}},
        "capabilities": {"type": "object"},
        "skills": {"type": "array", "items": {"type": "object"}},
    },
    "required": ["name", "version", "supportedInterfaces", "capabilities", "skills"],
}


def setup(app: web.Application) -> None:
    ctx = app[CONTEXT]
    app[A2A] = A2AService(ctx, app[TASKS], app[APPROVALS])
    app[AGUI_RUNS] = AguiRuns(ctx, app[TASKS], app[APPROVALS], app[AGENTS])
    lifecycle.install(app)
    # read for GetTask/ListTasks/SubscribeToTask; the endpoint asks operate of the rest
    add_route(
        app,
        "POST",
        A2A_PATH,
        a2a_jsonrpc.a2a_endpoint,
        ("read", "operate"),
        Doc(
            "A2A 1.0 JSON-RPC endpoint of an agent",
            "protocols",
            content={
                "application/json": rpc.RESPONSE_SCHEMA,
                **sse_content("JSON-RPC responses (SendStreamingMessage, SubscribeToTask)"),
            },
            errors=(404, 429),
            body_content={"application/json": rpc.REQUEST_SCHEMA},
            description="Methods SendMessage, SendStreamingMessage, GetTask, ListTasks, "
            "CancelTask, SubscribeToTask and the push notification configs (Create, Get, "
            "List, Delete TaskPushNotificationConfig). Sends, cancels, and creating or "
            "deleting a push config need the operate scope. See docs/protocols/a2a.md.",
        ),
    )
    add_route(
        app,
        "GET",
        AGENT_CARD_PATH,
        a2a_jsonrpc.get_agent_card,
        PUBLIC,
        Doc(
            "The A2A agent card of one agent (its own JSON-RPC interface)",
            "discovery",
            content={"application/json": AGENT_CARD_SCHEMA},
            errors=(404,),
            description="An A2A 1.0 AgentCard as the a2a-sdk reads it; see docs/protocols/a2a.md.",
        ),
    )
    add_route(
        app,
        "POST",
        AGUI_PATH,
        agui_run.agui_run,
        "operate",
        Doc(
            "Run an agent with AG-UI 1.0 (RunAgentInput in, AG-UI events out)",
            "protocols",
            content=sse_content(
                "RUN_STARTED ... RUN_FINISHED (success, interrupt, cancelled) or RUN_ERROR"
            ),
            errors=(400, 404, 429),
            body_content={
                "application/json": {"type": "object", "required": ["threadId", "runId"]}
            },
            description="See docs/protocols/agui.md.",
        ),
    )
