"""POST /a2a/{agent}: the A2A 1.0 JSON-RPC binding for one hosted agent, and its agent card.

Thin: parse the envelope, check the method and the caller's scope, decode params, call the
A2A service, encode. Sends and cancels need `operate`; reads and subscriptions `read` (or
`operate`). Errors of the call are JSON-RPC errors in a 200 answer, or for a streaming method
in its stream's last (or only) event; only the transport's own faults (auth, unknown agent,
no stream slot) are HTTP problems.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

from node.context import NodeContext, context_of
from node.protocols import a2a_card, a2a_push
from node.protocols import a2a_model as m
from node.protocols.a2a_params import GetTaskParams, ListTasksParams, SendParams, TaskIdParams
from node.protocols.a2a_params import decode as decode_params
from node.protocols.a2a_service import A2A, A2AService, Update
from node.protocols.follow import JournalCursor
from node.protocols.lifecycle import StopSignal, revoked
from node.streams.slots import STREAM_SLOTS
from node.streams.sse import ClientGone, SseOut
from node.web import jsonrpc as rpc
from node.web.auth import identity_of
from node.web.body import read_body
from node.web.http import Problem, json_response
from projections.tasks import Task

log = logging.getLogger(__name__)
PROTOCOL_VERSION = a2a_card.PROTOCOL_VERSION
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


class CallContext:
    """What a method needs: the node, the agent of the endpoint, the caller, the request."""

    def __init__(self, request: web.Request, agent: str, call: rpc.Call) -> None:
        self.request = request
        self.ctx: NodeContext = context_of(request)
        self.agent = agent
        self.call = call
        identity = identity_of(request)
        self.operator = identity.name if identity else "anonymous"
        self.groups = identity.groups if identity else frozenset()  # approver groups
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
async def _sent(c: CallContext) -> tuple[SendParams, Task, JournalCursor]:
    """SendMessage and SendStreamingMessage: the task, with the push config sent with it."""
    params = decode_params(c.call.params, SendParams)
    raw_config = params.configuration.task_push_notification_config
    preceded_by = None
    if raw_config is not None and params.message.task_id:
        await a2a_push.on_follow_up(c, raw_config, params.message.task_id)
    elif raw_config is not None:
        preceded_by = await a2a_push.with_message(c, raw_config)
    task, cursor = await c.service.send(c.agent, params, c.operator, preceded_by, c.groups)
    return params, task, cursor


def _still_waiting(c: CallContext, params: SendParams, task: Task) -> bool:
    """An answer that left the task input-required (one approval of several, counted) has
    reached the interrupted state a blocking call waits for, and a stream ends at: nothing
    is to come from this call."""
    return bool(params.message.task_id) and c.service.views.state(task) == m.INPUT_REQUIRED


async def send_message(c: CallContext) -> Any:
    params, task, cursor = await _sent(c)
    if not params.configuration.return_immediately and not _still_waiting(c, params, task):
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


async def extended_card(c: CallContext) -> Any:
    """Every card says `extendedAgentCard: false`, so A2A 1.0 §3.3.4 asks for
    UnsupportedOperation (-32007 is for an agent that declares one but has none configured)."""
    raise rpc.RpcError(
        m.UNSUPPORTED_OPERATION,
        "this agent has no extended agent card (its card says extendedAgentCard: false)",
        reason="UNSUPPORTED_OPERATION",
    )


async def send_streaming(c: CallContext) -> tuple[Update, Updates]:
    params, task, cursor = await _sent(c)
    first = (
        c.service.submitted(task)
        if not params.message.task_id
        else {"task": c.service.task_json(c.agent, task.id)}
    )
    stop = _stream_stop(c)
    if _still_waiting(c, params, task):  # the task as the answer left it, and the end
        return first, _closing(stop, _nothing())
    return first, _closing(
        stop,
        c.service.updates(
            task.id, cursor, stop, end_on_input_required=True, keepalive=_keepalive(c)
        ),
    )


async def _nothing() -> AsyncIterator[Update | None]:
    return
    yield  # an async generator that ends at once


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
    **a2a_push.METHODS,
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
        return await _stream_error(out, call.id, error)
    except Exception:
        log.exception("A2A %s on %s failed", call.method, context.agent)
        internal = rpc.RpcError(rpc.INTERNAL_ERROR, "the node failed to handle this call")
        return await _stream_error(out, call.id, internal)
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


async def _stream_error(out: SseOut, id_: rpc.RequestId, error: rpc.RpcError) -> web.StreamResponse:
    """An error of a streaming method before its first event: a stream of that one error.
    A2A 1.0 §9.4.2 answers a streaming method with text/event-stream (the A2A TCK expects its
    errors there too); the official a2a-sdk client reads this as well as a JSON answer."""
    with contextlib.suppress(ConnectionError, RuntimeError):  # gone: send_last sees it too
        await out.open()
    await out.send_last(rpc.error_response(id_, error))
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
async def get_agent_card(request: web.Request) -> web.Response:
    return json_response(a2a_card.agent_card(context_of(request), hosted_agent(request)))
