"""A2A 1.0 push notification configs over JSON-RPC: Create, Get, List, Delete
TaskPushNotificationConfig, on the node's outbox (node/delivery/, docs/notifications.md).

A config belongs to the token that set it: Get, List and Delete see only the caller's own
configs (an admin token sees every one). The answers carry the URL and the authentication
scheme, never the token or the credentials. A URL whose host resolves to an address the
node may not send to is refused (-32602) when it is set, and checked again at every delivery.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Any, Protocol

from aiohttp import web

from eventstore.store import NewEvent
from node.delivery import push
from node.delivery.addresses import DestinationRefused
from node.delivery.sealing import Destination
from node.delivery.service import OUTBOX, Outbox
from node.protocols import a2a_model as m
from node.protocols.a2a_params import decode
from node.protocols.a2a_service import A2AService
from node.web.auth import identity_of
from node.web.http import Problem
from node.web.jsonrpc import INVALID_PARAMS, Call, RpcError

MAX_PAGE_SIZE = 100


class CallContext(Protocol):
    """What a method gets from the endpoint (a2a_jsonrpc.CallContext)."""

    request: web.Request
    agent: str
    call: Call
    operator: str

    @property
    def service(self) -> A2AService: ...


def _outbox(c: CallContext) -> Outbox:
    return c.request.app[OUTBOX]


def _is_admin(c: CallContext) -> bool:
    identity = identity_of(c.request)
    return identity is not None and "admin" in identity.scopes


async def _checked(outbox: Outbox, params: push.PushConfigParams) -> None:
    problem = push.problem_of(params)
    if problem is not None:
        raise RpcError(INVALID_PARAMS, f"invalid push notification config: {problem}")
    try:
        await outbox.check_destination(params.url)
    except DestinationRefused as exc:
        raise RpcError(INVALID_PARAMS, f"push notification URL refused: {exc}") from None


def _room(outbox: Outbox, task_id: str, config_id: str, client: str) -> None:
    why = outbox.room_for(task_id, config_id, client)
    if why is not None:
        raise RpcError(INVALID_PARAMS, f"push notification config refused: {why}")


async def create(c: CallContext) -> Any:
    params = decode(c.call.params, push.PushConfigParams)
    task = c.service.get(c.agent, params.task_id)  # -32001 when it is not this agent's
    outbox = _outbox(c)
    await _checked(outbox, params)
    config_id = params.id or task.id  # as the a2a-sdk does: one default config per task
    mine = _own(c, task.id, config_id)
    if mine is None and outbox.book.config(task.id, config_id) is not None:
        raise RpcError(INVALID_PARAMS, f"push notification config {config_id!r} is another token's")
    _room(outbox, task.id, config_id, c.operator)
    destination = push.destination_of(params)
    try:
        await outbox.configure(c.agent, task.id, config_id, c.operator, destination)
    except Problem as exc:
        raise RpcError(m.UNSUPPORTED_OPERATION, exc.detail) from None
    return push.config_json(task.id, config_id, destination)


def _own(c: CallContext, task_id: str, config_id: str) -> Any:
    """The config with its destination, when the caller may see it; else None."""
    for config, destination in _outbox(c).configs(task_id):
        if config.id == config_id and (config.client == c.operator or _is_admin(c)):
            return config, destination
    return None


def _not_found(task_id: str, config_id: str) -> RpcError:
    return RpcError(
        m.TASK_NOT_FOUND,
        f"no push notification config {config_id!r} of task {task_id!r} for this token",
        reason="TASK_NOT_FOUND",
        taskId=task_id,
    )


async def get(c: CallContext) -> Any:
    params = decode(c.call.params, push.ConfigRef)
    task = c.service.get(c.agent, params.task_id)
    found = _own(c, task.id, params.id)
    if found is None:
        raise _not_found(task.id, params.id)
    config, destination = found
    return push.config_json(task.id, config.id, destination)


async def list_configs(c: CallContext) -> Any:
    params = decode(c.call.params, push.ListConfigsParams)
    task = c.service.get(c.agent, params.task_id)
    size = MAX_PAGE_SIZE if not params.page_size else params.page_size
    if not 1 <= size <= MAX_PAGE_SIZE:
        raise RpcError(INVALID_PARAMS, f"pageSize must be 1..{MAX_PAGE_SIZE}")
    start = 0
    if params.page_token:
        if not params.page_token.isdigit() or len(params.page_token) > 9:
            raise RpcError(INVALID_PARAMS, "pageToken is not one this node issued")
        start = int(params.page_token)
    visible = [
        push.config_json(task.id, config.id, destination)
        for config, destination in _outbox(c).configs(task.id)
        if config.client == c.operator or _is_admin(c)
    ]
    page = visible[start : start + size]
    following = start + len(page)
    return {"configs": page, "nextPageToken": str(following) if following < len(visible) else ""}


async def delete(c: CallContext) -> Any:
    params = decode(c.call.params, push.ConfigRef)
    task = c.service.get(c.agent, params.task_id)
    if _own(c, task.id, params.id) is None:
        raise _not_found(task.id, params.id)
    try:
        await _outbox(c).remove(c.agent, task.id, params.id, c.operator)
    except Problem as exc:
        raise RpcError(m.UNSUPPORTED_OPERATION, exc.detail) from None
    return {}


async def with_message(c: CallContext, raw: dict[str, Any]) -> Callable[[str], list[NewEvent]]:
    """SendMessage's configuration.taskPushNotificationConfig: checked now, journaled in the
    same write as the task it creates (TaskService.create `preceded_by`)."""
    params = decode(raw, push.PushConfigParams)
    outbox = _outbox(c)
    await _checked(outbox, params)
    _room(outbox, "", params.id, c.operator)  # a new task has no configs: the token's bound
    destination = push.destination_of(params)

    def events(task_id: str) -> list[NewEvent]:
        config_id = params.id or task_id
        return [outbox.config_event(c.agent, task_id, config_id, c.operator, destination)]

    return events


async def on_follow_up(c: CallContext, raw: dict[str, Any], task_id: str) -> None:
    """SendMessage's push config on a message to an existing task: accepted, and nothing
    journaled, when it is one the caller set on the task already, unchanged (a client such as
    the a2a-sdk puts its configured push config on every message); refused (-32602) when it
    would change or add one, which CreateTaskPushNotificationConfig does."""
    params = decode(raw, push.PushConfigParams)
    problem = push.problem_of(params)
    if problem is not None:
        raise RpcError(INVALID_PARAMS, f"invalid push notification config: {problem}")
    task = c.service.get(c.agent, task_id)  # -32001 when it is not this agent's
    config_id = params.id or task.id
    mine = _own(c, task.id, config_id)
    if mine is not None and _same(mine[1], push.destination_of(params)):
        return
    raise RpcError(
        INVALID_PARAMS,
        f"the push notification config {config_id!r} on this message is not one this token set "
        f"on task {task.id}, unchanged: a message to an existing task may repeat its config as "
        "it is; to set or change one, use CreateTaskPushNotificationConfig",
    )


def _same(kept: Destination | None, sent: Destination) -> bool:
    """The same destination, its secrets compared in constant time."""
    if kept is None:
        return False
    return all(
        hmac.compare_digest(str(getattr(kept, name)).encode(), str(getattr(sent, name)).encode())
        for name in ("url", "token", "scheme", "credentials")
    )


METHODS = {
    "CreateTaskPushNotificationConfig": create,
    "GetTaskPushNotificationConfig": get,
    "ListTaskPushNotificationConfigs": list_configs,
    "DeleteTaskPushNotificationConfig": delete,
}
