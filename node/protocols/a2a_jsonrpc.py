"""POST /a2a/{agent}: the A2A 1.0 JSON-RPC binding for one hosted agent, and its agent card.

Thin: parse the envelope, check the method and the caller's scope, decode params, call the
A2A service, encode. Sends and cancels need `operate`; reads and subscriptions `read` (or
`operate`). Errors of the call are JSON-RPC errors in a 200 answer (before a stream starts)
or in the stream's last event; only the transport's own faults (auth, unknown agent) are
HTTP problems.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

from node.context import NodeContext, context_of
from node.ops.version import __version__
from node.protocols import a2a_model as m
from node.protocols.a2a_params import GetTaskParams, ListTasksParams, SendParams, TaskIdParams
from node.protocols.a2a_params import decode as decode_params
from node.protocols.a2a_service import A2A, A2AService, Update
from node.protocols.lifecycle import StopSignal, revoked
from node.streams.slots import STREAM_SLOTS
from node.streams.sse import ClientGone, SseOut
from node.web import jsonrpc as rpc
from node.web.auth import identity_of
from node.web.body import read_body
from node.web.http import Problem, json_response

log = logging.getLogger(__name__)
PROTOCOL_VERSION = "1.0"
VERSION_HEADER = "A2A-Version"
# How long a blocking SendMessage waits for a final or input-required task.
BLOCKING_WAIT_SECS = 60.0
# A stream's updates after its first event (None: a keepalive); closed when the stream ends.
Updates = AsyncGenerator[Update | None, None]

WRITE_METHODS = frozenset(
    {
        "SendMessage",
        "SendStreamingMessage",
        "CancelTask",
        "CreateTaskPushNotificationConfig",
        "DeleteTaskPushNotificationConfig",
    }
)
PUSH_METHODS = frozenset(
    {
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
    }
)


class CallContext:
    """What a method needs: the node, the agent of the endpoint, the caller, the request."""

    def __init__(self, request: web.Request, agent: str, call: rpc.Call) -> None:
        self.request = request
        self.ctx: NodeContext = context_of(request)
        self.agent = agent
        self.call = call
        identity = identity_of(request)
        self.operator = identity.name if identity else "anonymous"
        self.stop: StopSignal | None = None  # a streaming call's, set before it is called

    @property
    def service(self) -> A2AService:
        return self.request.app[A2A]


def hosted_agent(request: web.Request) -> str:
    name = request.match_info["agent"]
    if context_of(request).config.agent(name) is None:
        raise Problem(404, f"no agent named {name!r} is hosted on this node")
    return name


# ---------------------------------------------------------------------------- methods
async def send_message(c: CallContext) -> Any:
    params = decode_params(c.call.params, SendParams)
    task, cursor = await c.service.send(c.agent, params, c.operator)
    if not params.configuration.return_immediately:
        stop = StopSignal(c.request.app)
        deadline = asyncio.get_running_loop().time() + BLOCKING_WAIT_SECS
        try:
            async for _ in c.service.updates(
                task.id,
                cursor,
                stop,
                end_on_input_required=True,
                keepalive=BLOCKING_WAIT_SECS,
                deadline=deadline,
            ):
                pass
        finally:
            stop.close()
    history = params.configuration.history_length
    return {"task": c.service.task_json(c.agent, task.id, history)}


async def get_task(c: CallContext) -> Any:
    params = decode_params(c.call.params, GetTaskParams)
    return c.service.task_json(c.agent, params.id, params.history_length)


async def list_tasks(c: CallContext) -> Any:
    return c.service.list(c.agent, decode_params(c.call.params, ListTasksParams))


async def cancel_task(c: CallContext) -> Any:
    params = decode_params(c.call.params, TaskIdParams)
    return await c.service.cancel(c.agent, params.id, c.operator)


async def push_config(c: CallContext) -> Any:
    raise rpc.RpcError(
        m.PUSH_NOT_SUPPORTED,
        "push notifications are not supported",
        reason="PUSH_NOTIFICATION_NOT_SUPPORTED",
    )


async def extended_card(c: CallContext) -> Any:
    raise rpc.RpcError(
        m.EXTENDED_CARD_NOT_CONFIGURED,
        "there is no extended agent card",
        reason="EXTENDED_AGENT_CARD_NOT_CONFIGURED",
    )


async def send_streaming(c: CallContext) -> tuple[Update, Updates]:
    params = decode_params(c.call.params, SendParams)
    task, cursor = await c.service.send(c.agent, params, c.operator)
    first = (
        c.service.submitted(task)
        if not params.message.task_id
        else {"task": c.service.task_json(c.agent, task.id)}
    )
    stop = _stream_stop(c)
    return first, _closing(
        stop,
        c.service.updates(
            task.id, cursor, stop, end_on_input_required=True, keepalive=_keepalive(c)
        ),
    )


async def subscribe(c: CallContext) -> tuple[Update, Updates]:
    params = decode_params(c.call.params, TaskIdParams)
    first, cursor = c.service.snapshot(c.agent, params.id)
    stop = _stream_stop(c)
    return first, _closing(
        stop,
        c.service.updates(
            params.id, cursor, stop, end_on_input_required=False, keepalive=_keepalive(c)
        ),
    )


Method = Callable[[CallContext], Awaitable[Any]]
METHODS: dict[str, Method] = {
    "SendMessage": send_message,
    "GetTask": get_task,
    "ListTasks": list_tasks,
    "CancelTask": cancel_task,
    "GetExtendedAgentCard": extended_card,
    **dict.fromkeys(PUSH_METHODS, push_config),
}
STREAMING: dict[str, Callable[[CallContext], Awaitable[tuple[Update, Updates]]]] = {
    "SendStreamingMessage": send_streaming,
    "SubscribeToTask": subscribe,
}


# ---------------------------------------------------------------------------- endpoint
async def a2a_endpoint(request: web.Request) -> web.StreamResponse:
    agent = hosted_agent(request)
    call = rpc.parse(await read_body(request))
    if isinstance(call, dict):
        return json_response(call)
    version_error = _version_error(request)
    if version_error is not None:
        return json_response(rpc.error_response(call.id, version_error))
    if call.method not in METHODS and call.method not in STREAMING:
        error = rpc.RpcError(rpc.METHOD_NOT_FOUND, f"method {call.method!r} not found")
        return json_response(rpc.error_response(call.id, error))
    identity = identity_of(request)
    if call.method in WRITE_METHODS and identity is not None and not identity.allows(("operate",)):
        raise Problem(
            403, f"token {identity.name!r} may read tasks but {call.method} needs the operate scope"
        )
    context = CallContext(request, agent, call)
    if call.method in STREAMING:
        return await _streaming(request, context)
    try:
        result = await METHODS[call.method](context)
    except rpc.RpcError as error:
        return json_response(rpc.error_response(call.id, error))
    except Exception:
        log.exception("A2A %s on %s failed", call.method, agent)
        internal = rpc.RpcError(rpc.INTERNAL_ERROR, "the node failed to handle this call")
        return json_response(rpc.error_response(call.id, internal))
    return json_response(rpc.result_response(call.id, result))


async def _streaming(request: web.Request, context: CallContext) -> web.StreamResponse:
    """A streaming call, holding a stream slot (a 429 past the caps, before anything is done)
    that a revocation of the caller's token ends."""
    call = context.call
    slots = request.app[STREAM_SLOTS]
    slot = slots.open(request)
    out = SseOut(request)
    stop = context.stop = StopSignal(request.app)
    slot.on_revoke = lambda: revoked(stop, out)
    try:
        first, updates = await STREAMING[call.method](context)
        return await _stream(out, call.id, first, updates)
    except rpc.RpcError as error:
        return json_response(rpc.error_response(call.id, error))
    except Exception:
        log.exception("A2A %s on %s failed", call.method, context.agent)
        internal = rpc.RpcError(rpc.INTERNAL_ERROR, "the node failed to handle this call")
        return json_response(rpc.error_response(call.id, internal))
    finally:
        stop.close()
        slots.close(slot)


def _stream_stop(c: CallContext) -> StopSignal:
    assert c.stop is not None, "a streaming call is made through _streaming"
    return c.stop


async def _stream(
    out: SseOut, id_: rpc.RequestId, first: Update, updates: Updates
) -> web.StreamResponse:
    request = out.request
    try:
        await out.open()
        await out.send(rpc.result_response(id_, first))
        async for update in updates:
            if update is None:
                await out.ping()
            else:
                await out.send(rpc.result_response(id_, update))
    except ClientGone:
        pass
    except rpc.RpcError as error:
        await out.send_last(rpc.error_response(id_, error))
    except Exception:
        log.exception("A2A stream for %s failed", request.path)
        internal = rpc.RpcError(rpc.INTERNAL_ERROR, "the node failed while streaming")
        await out.send_last(rpc.error_response(id_, internal))
    finally:
        await updates.aclose()
    return out.response


async def _closing(stop: StopSignal, updates: AsyncIterator[Update | None]) -> Updates:
    try:
        async for update in updates:
            yield update
    finally:
        stop.close()


def _version_error(request: web.Request) -> rpc.RpcError | None:
    """A2A-Version names the protocol the client speaks; absent means this node's (1.0)."""
    asked = request.headers.get(VERSION_HEADER, "").strip()
    if not asked or asked.split(".")[:2] == PROTOCOL_VERSION.split("."):
        return None
    return rpc.RpcError(
        m.VERSION_NOT_SUPPORTED,
        f"A2A version {asked} is not supported; this node speaks {PROTOCOL_VERSION}",
        reason="VERSION_NOT_SUPPORTED",
    )


def _keepalive(c: CallContext) -> float:
    return c.ctx.config.node.sse_keepalive_secs


# ---------------------------------------------------------------------------- agent card
def agent_card(ctx: NodeContext, name: str) -> dict[str, Any]:
    """One agent's A2A card: its own JSON-RPC interface, so `create_client(<base>/a2a/<name>)`
    talks to exactly this agent."""
    agent = ctx.config.agent(name)
    assert agent is not None
    base = ctx.config.public_url
    tags = sorted(c for c, on in agent.capabilities.items() if on) + (["mcp"] if agent.mcp else [])
    description = agent.description or f"Agent {name} on node {ctx.name}"
    return {
        "name": name,
        "description": description,
        "version": __version__,
        "supportedInterfaces": [
            {
                "url": a2a_url(ctx, name),
                "protocolBinding": "JSONRPC",
                "protocolVersion": PROTOCOL_VERSION,
            }
        ],
        "provider": {"organization": ctx.name, "url": base},
        "capabilities": {"streaming": True, "pushNotifications": False, "extendedAgentCard": False},
        "securitySchemes": {
            "bearer": {
                "httpAuthSecurityScheme": {
                    "scheme": "Bearer",
                    "description": "a token of the node's [[auth.tokens]]: read for GetTask, "
                    "ListTasks and SubscribeToTask; operate for sends and cancels",
                }
            }
        },
        "securityRequirements": [{"schemes": {"bearer": {"list": []}}}],
        "defaultInputModes": ["application/json", "text/plain"],
        "defaultOutputModes": ["application/json"],
        "skills": [{"id": name, "name": name, "description": description, "tags": tags}],
    }


def a2a_url(ctx: NodeContext, name: str) -> str:
    return f"{ctx.config.public_url}/a2a/{name}"


async def get_agent_card(request: web.Request) -> web.Response:
    return json_response(agent_card(context_of(request), hosted_agent(request)))
