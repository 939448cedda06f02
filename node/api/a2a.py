"""A2A tasks: create, list, read. Their SSE stream, GET /api/v1/a2a/events, is node.streams'."""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from aiohttp import web

from node.auth import IDENTITY
from node.config import AgentName
from node.context import CONTEXT
from node.http import Problem, json_body, json_response
from node.routes import Doc, Query, add_route
from node.services.tasks import TASKS, TaskService
from projections.tasks import STATUSES, Status, Task


class TaskCreated(msgspec.Struct):
    id: str
    status: Literal["pending"]
    created_at: str


class NewTask(msgspec.Struct, forbid_unknown_fields=True):
    # the sender as the caller says; a name other than the token's is kept as the caller's
    # assertion (`from_asserted`), next to the token that made it (`created_by`)
    from_: AgentName = msgspec.field(name="from")
    to: AgentName
    input: dict[str, Any] = {}


def tasks_of(request: web.Request) -> TaskService:
    return request.app[TASKS]


async def create_task(request: web.Request) -> web.Response:
    body = await json_body(request, NewTask)
    caller = request[IDENTITY].name
    created = await tasks_of(request).create(body.from_, body.to, body.input, caller=caller)
    return json_response(created, status=201)


async def list_tasks(request: web.Request) -> web.Response:
    status = request.query.get("status") or None
    if status is not None and status not in STATUSES:
        raise Problem(
            400, f"query parameter `status` must be one of {', '.join(STATUSES)}, got {status!r}"
        )
    agent = request.query.get("agent") or None
    return json_response(tasks_of(request).list(status, agent))


async def read_task(request: web.Request) -> web.Response:
    return json_response(tasks_of(request).get(request.match_info["task_id"]))


def setup(app: web.Application) -> None:
    ctx = app[CONTEXT]
    app[TASKS] = TaskService(ctx)
    add_route(
        app,
        "GET",
        "/api/v1/a2a/tasks",
        list_tasks,
        "read",
        Doc(
            "A2A tasks, oldest first",
            "a2a",
            list[Task],
            errors=(400,),
            query=(
                Query("status", Status, "only this status"),
                Query("agent", str, "only tasks assigned to this agent"),
            ),
        ),
    )
    add_route(
        app,
        "POST",
        "/api/v1/a2a/tasks",
        create_task,
        "operate",
        Doc(
            "Create a task for a hosted agent",
            "a2a",
            TaskCreated,
            status=201,
            errors=(400, 404, 409, 413),
            body=NewTask,
            description="413 when the input is over 64 KiB as JSON (its event must stay "
            "replicable).",
        ),
    )
    add_route(
        app,
        "GET",
        "/api/v1/a2a/tasks/{task_id}",
        read_task,
        "read",
        Doc("One A2A task", "a2a", Task, errors=(404,)),
    )
