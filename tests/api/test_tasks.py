"""A2A tasks over HTTP, the runtime's task commands, and the task lifecycle SSE stream."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from node.app import build_app
from node.context import CONTEXT
from node.services.tasks import TASKS
from node.web.http import Problem
from projections.tasks import Tasks
from tests.support import (
    OPERATE_TOKEN,
    PUBLISH_TOKEN,
    READ_TOKEN,
    SseStream,
    auth,
    make_config,
    replicate,
    tiny_component,
)

AGENTS = """
[[agents]]
name = "worker"
component = "agent.wasm"

[[agents]]
name = "helper"
component = "agent.wasm"
"""


@pytest.fixture
async def client(tmp_path, aiohttp_client):
    tiny_component(tmp_path / "agent.wasm")
    return await aiohttp_client(build_app(make_config(tmp_path, AGENTS)))


def tasks_of(client):
    return client.app[TASKS]


async def create(client, to="worker", input=None, sender="planner"):
    body = (
        {"from": sender, "to": to} if input is None else {"from": sender, "to": to, "input": input}
    )
    response = await client.post("/api/v1/a2a/tasks", json=body, headers=auth(OPERATE_TOKEN))
    assert response.status == 201, await response.text()
    return await response.json()


async def test_create_answers_201_pending_and_journals_in_the_assignee(client):
    created = await create(client, input={"invoice": 7})
    assert created["status"] == "pending"
    assert set(created) == {"id", "status", "created_at"}
    journal = client.app[CONTEXT].store.read_stream("worker", 0, 100)
    [envelope] = [e for e in journal if e.event.type.startswith("task.")]  # not agent.*
    assert envelope.event.type == "task.created"
    assert envelope.event.data == {
        "id": created["id"],
        "from": "planner",
        "to": "worker",
        "input": {"invoice": 7},
        "caller": "operator",
    }
    assert created["created_at"] == envelope.event.ts
    response = await client.get(f"/api/v1/a2a/tasks/{created['id']}", headers=auth(READ_TOKEN))
    assert response.status == 200
    assert await response.json() == {
        "id": created["id"],
        "from": "planner",
        "to": "worker",
        "status": "pending",
        "input": {"invoice": 7},
        "output": None,
        "created_at": created["created_at"],
        "completed_at": None,
        "created_by": "operator",
        "from_asserted": True,
    }


async def test_from_is_the_token_unless_the_caller_asserts_another(client):
    """Attribution (issue 34): the journal records the calling token; a `from` naming someone
    else is kept as the caller's assertion, never as a fact."""
    claimed = await create(client, sender="operator")  # its own name
    task = await (await client.get(f"/api/v1/a2a/tasks/{claimed['id']}", headers=auth())).json()
    assert (task["from"], task["created_by"]) == ("operator", "operator")
    assert "from_asserted" not in task
    # the JSON-RPC door records the same caller
    rpc = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]},
            "configuration": {"returnImmediately": True},
        },
    }
    answer = await client.post("/a2a/worker", json=rpc, headers=auth(OPERATE_TOKEN))
    assert answer.status == 200, await answer.text()
    [rpc_task] = [t for t in tasks_of(client).list() if t.input != {}]
    assert (rpc_task.from_, rpc_task.created_by) == ("operator", "operator")
    assert rpc_task.from_asserted is msgspec.UNSET


async def test_input_defaults_to_an_empty_object(client):
    created = await create(client)
    task = await (await client.get(f"/api/v1/a2a/tasks/{created['id']}", headers=auth())).json()
    assert task["input"] == {}


async def test_lifecycle_from_the_runtime_sets_status_output_and_completed_at(client):
    service = tasks_of(client)
    a, b = await create(client), await create(client)
    assert [t.id for t in service.list("pending", "worker")] == [a["id"], b["id"]]
    assert service.list("pending", "worker")[0].from_ == "planner"
    await service.start(a["id"])
    await service.progress(a["id"], {"step": 1})
    assert [t.id for t in service.list("pending", "worker")] == [b["id"]]
    running = await (await client.get(f"/api/v1/a2a/tasks/{a['id']}", headers=auth())).json()
    assert running["status"] == "running" and running["progress"] == {"step": 1}
    envelope = await service.complete(a["id"], {"paid": True})
    done = await (await client.get(f"/api/v1/a2a/tasks/{a['id']}", headers=auth())).json()
    assert done["status"] == "completed"
    assert done["output"] == {"paid": True}
    assert done["completed_at"] == envelope.event.ts
    failed_envelope = await service.fail(b["id"], "no funds")
    failed = await (await client.get(f"/api/v1/a2a/tasks/{b['id']}", headers=auth())).json()
    assert failed["status"] == "failed" and failed["error"] == "no funds"
    assert failed["completed_at"] == failed_envelope.event.ts and failed["output"] is None
    assert service.list("pending", "worker") == []
    journal = client.app[CONTEXT].store.read_stream("worker", 0, 100)
    types = [e.event.type for e in journal if e.event.type.startswith("task.")]
    assert types == [
        "task.created",
        "task.created",
        "task.started",
        "task.progress",
        "task.completed",
        "task.failed",
    ]


async def test_runtime_commands_that_do_not_fit_the_status_are_refused(client):
    service = tasks_of(client)
    task = await create(client)
    await service.start(task["id"])
    await service.start(task["id"])  # delivered again after a restart: still running
    assert service.get(task["id"]).status == "running"
    await service.fail(task["id"], "boom")
    for command in (
        service.start(task["id"]),
        service.complete(task["id"], {}),
        service.progress(task["id"], "x"),
    ):
        with pytest.raises(Problem) as refused:
            await command
        assert refused.value.status == 409 and "failed" in refused.value.detail
    with pytest.raises(Problem) as unknown:
        await service.start("nope")
    assert unknown.value.status == 404


async def test_list_filters_by_status_and_assigned_agent(client):
    service = tasks_of(client)
    a = await create(client, "worker")
    b = await create(client, "helper")
    c = await create(client, "worker")
    await service.start(c["id"])

    async def ids(query=""):
        response = await client.get(f"/api/v1/a2a/tasks{query}", headers=auth(READ_TOKEN))
        assert response.status == 200
        return [t["id"] for t in await response.json()]

    assert await ids() == [a["id"], b["id"], c["id"]]
    assert await ids("?agent=worker") == [a["id"], c["id"]]
    assert await ids("?status=pending") == [a["id"], b["id"]]
    assert await ids("?status=pending&agent=worker") == [a["id"]]
    assert await ids("?status=running") == [c["id"]]
    assert await ids("?status=completed") == []
    assert await ids("?agent=nobody") == []


async def test_bad_status_filter_is_400(client):
    response = await client.get("/api/v1/a2a/tasks?status=done", headers=auth())
    assert response.status == 400
    assert "status" in (await response.json())["detail"]


async def test_unknown_task_is_404(client):
    response = await client.get("/api/v1/a2a/tasks/does-not-exist", headers=auth())
    assert response.status == 404
    assert response.content_type == "application/problem+json"


async def test_unknown_assignee_is_404_and_journals_nothing(client):
    response = await client.post(
        "/api/v1/a2a/tasks", json={"from": "planner", "to": "ghost"}, headers=auth()
    )
    assert response.status == 404
    assert "ghost" in (await response.json())["detail"]
    assert client.app[CONTEXT].store.head("ghost") is None


async def test_assignee_hosted_elsewhere_is_409_naming_its_home(client):
    await replicate(client.app[CONTEXT].store, "remote", "log", {"level": "info", "message": ""})
    response = await client.post(
        "/api/v1/a2a/tasks", json={"from": "planner", "to": "remote"}, headers=auth()
    )
    assert response.status == 409
    assert (await response.json())["home_node"] == "node-b"


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"to": "worker"}, "from"),
        ({"from": "planner"}, "to"),
        ({"from": "planner", "to": "worker", "input": [1, 2]}, "input"),
        ({"from": "planner", "to": "worker", "input": "text"}, "input"),
        ({"from": "planner", "to": "worker", "input": None}, "input"),
        ({"from": 5, "to": "worker"}, "from"),
        ({"from": "bad name!", "to": "worker"}, "from"),
        ({"from": "planner", "to": "worker", "priority": 1}, "priority"),
    ],
)
async def test_bad_task_bodies_are_400(client, body, needle):
    response = await client.post("/api/v1/a2a/tasks", json=body, headers=auth())
    assert response.status == 400
    assert needle in (await response.json())["detail"]
    assert client.app[CONTEXT].projections.get(Tasks).list() == []


async def test_malformed_json_is_400(client):
    response = await client.post(
        "/api/v1/a2a/tasks",
        data=b'{"from": "planner", ',
        headers={**auth(), "Content-Type": "application/json"},
    )
    assert response.status == 400
    assert "malformed JSON" in (await response.json())["detail"]


async def test_scopes(client):
    body = {"from": "planner", "to": "worker"}
    assert (await client.post("/api/v1/a2a/tasks", json=body)).status == 401
    assert (
        await client.post("/api/v1/a2a/tasks", json=body, headers=auth(READ_TOKEN))
    ).status == 403
    assert (
        await client.post("/api/v1/a2a/tasks", json=body, headers=auth(PUBLISH_TOKEN))
    ).status == 403
    assert (await client.get("/api/v1/a2a/tasks")).status == 401
    assert (await client.get("/api/v1/a2a/events")).status == 401


async def test_event_stream_carries_the_task_lifecycle(client):
    service = tasks_of(client)
    base = str(client.make_url("/")).rstrip("/")
    async with SseStream(base, "/api/v1/a2a/events", READ_TOKEN) as stream:
        assert stream.response.status_code == 200
        assert stream.response.headers["content-type"].startswith("text/event-stream")
        await asyncio.sleep(0.05)
        await client.post(  # an unrelated event in between: not on this stream
            "/api/v1/findings",
            json={"agent": "node-a", "severity": "info", "title": "t"},
            headers=auth(),
        )
        a = await create(client, input={"n": 1})
        await service.start(a["id"])
        await service.progress(a["id"], "half way")
        await service.complete(a["id"], {"ok": 1})
        b = await create(client, "helper")
        await service.fail(b["id"], "nope")
        events = await stream.take(6)
    assert [e.event for e in events] == [
        "task_created",
        "task_started",
        "task_progress",
        "task_completed",
        "task_created",
        "task_failed",
    ]
    data = [e.json() for e in events]
    assert data[0] == {
        "id": a["id"],
        "from": "planner",
        "to": "worker",
        "status": "pending",
        "created_at": a["created_at"],
    }
    assert data[1] == {"id": a["id"]}
    assert data[2] == {"id": a["id"], "progress": "half way"}
    assert data[3] == {"id": a["id"], "output": {"ok": 1}}
    assert data[5] == {"id": b["id"], "error": "nope"}
    assert [int(e.id) for e in events] == sorted(int(e.id) for e in events)
