"""A2A tasks: create, list, read. Their SSE stream, GET /api/v1/a2a/events, is node.streams'."""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from aiohttp import web

from node.config.model import AgentName
from node.context import CONTEXT
from node.services.tasks import ELIDE_BYTES, TASKS, TaskQuery, TaskService
from node.web.auth import IDENTITY
from node.web.body import json_body
from node.web.http import (
    MAX_LIMIT,
    NonNegative,
    Problem,
    int_query,
    json_response,
    limit_query,
    page_bytes,
)
from node.web.pages import CURSOR, NEXT_CURSOR, next_cursor
from node.web.routes import Doc, Query, add_route
from projections.tasks import STATUSES, Status, Task

# the response header with the cursor of the next page (absent on the last page)


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
    query = TaskQuery(
        status,
        agent,
        after=int_query(request, "cursor", 0),
        limit=limit_query(request, MAX_LIMIT),
        max_bytes=page_bytes(request.app[CONTEXT]),
    )
    page = tasks_of(request).page(query)
    response = json_response(page.tasks)
    if page.next_cursor is not None:
        next_cursor(request, response, page.next_cursor)
    return response


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
            "A2A tasks, oldest first, a page at a time",
            "a2a",
            list[Task],
            errors=(400,),
            query=(
                Query("status", Status, "only this status"),
                Query("agent", str, "only tasks assigned to this agent"),
                CURSOR,
                Query("limit", NonNegative, f"maximum tasks (default and most {MAX_LIMIT})"),
            ),
            description=f"A page ends at `limit` tasks or at about `node.page_max_kb` of "
            f"JSON; when more follow, the `{NEXT_CURSOR}` header (and a `Link` rel=next) "
            "gives the `cursor` of the next page. In a list, an input, output or progress "
            f"over {ELIDE_BYTES} bytes is left out and named in `elided`: read the task "
            "alone for it.",
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
            errors=(400, 404, 409, 413, 429, 503),
            body=NewTask,
            description="413 when the input is over 64 KiB as JSON (its event must stay "
            "replicable); 429 when the agent already has `node.max_open_tasks_per_agent` "
            "pending or running tasks; 503 for a placed agent when the mesh's stream did not "
            "acknowledge the task within the agent's lease (docs/mesh.md).",
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
