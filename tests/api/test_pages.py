"""Lists bounded in bytes as well as count: the A2A task list's pages and elided values, pages
of findings and of pushed envelopes stopping at `node.page_max_kb`, and the open-tasks cap."""

from __future__ import annotations

import json

import pytest

from node.app import build_app
from node.context import CONTEXT
from node.services.tasks import ELIDE_BYTES
from node.web.pages import NEXT_CURSOR
from projections.approvals import hash_request
from tests.api.test_tasks import AGENTS  # worker and helper, one tiny component
from tests.support import (
    OPERATE_TOKEN,
    READ_TOKEN,
    auth,
    make_config,
    replicate,
    tiny_component,
)

PAGE_KB = 16


@pytest.fixture
async def client(tmp_path, aiohttp_client):
    tiny_component(tmp_path / "agent.wasm")
    keys = f"page_max_kb = {PAGE_KB}\nmax_open_tasks_per_agent = 30\n"
    return await aiohttp_client(build_app(make_config(tmp_path, AGENTS, node=keys)))


async def create(client, input, to="worker"):
    body = {"from": "planner", "to": to, "input": input}
    response = await client.post("/api/v1/a2a/tasks", json=body, headers=auth(OPERATE_TOKEN))
    assert response.status == 201, await response.text()
    return (await response.json())["id"]


async def every_page(client, **params):
    """Follow the cursor to the end; the pages' sizes and every task."""
    sizes, tasks, cursor = [], [], None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        response = await client.get("/api/v1/a2a/tasks", params=query, headers=auth(READ_TOKEN))
        assert response.status == 200
        page = await response.json()
        sizes.append(len(page))
        tasks += page
        cursor = response.headers.get(NEXT_CURSOR)
        if cursor is None:
            return sizes, tasks
        assert response.headers["Link"].endswith('; rel="next"')


async def test_the_task_list_pages_with_a_cursor_and_without_one_lists_all(client):
    ids = [await create(client, {"n": i}, to=("worker", "helper")[i % 2]) for i in range(5)]
    sizes, tasks = await every_page(client, limit="2")
    assert sizes == [2, 2, 1]
    assert [t["id"] for t in tasks] == ids
    sizes, tasks = await every_page(client)  # the default: all of them, as before paging
    assert sizes == [5] and [t["id"] for t in tasks] == ids
    sizes, tasks = await every_page(client, agent="worker", limit="2")
    assert sizes == [2, 1] and [t["id"] for t in tasks] == ids[0::2]
    sizes, tasks = await every_page(client, status="pending", limit="1")
    assert sizes == [1] * 5 and [t["id"] for t in tasks] == ids
    none = await client.get("/api/v1/a2a/tasks?limit=0", headers=auth(READ_TOKEN))
    assert await none.json() == [] and NEXT_CURSOR not in none.headers
    bad = await client.get("/api/v1/a2a/tasks?cursor=-1", headers=auth(READ_TOKEN))
    assert bad.status == 400 and "cursor" in (await bad.json())["detail"]


async def test_the_task_list_leaves_large_values_to_the_single_read(client):
    large = {"blob": "x" * (ELIDE_BYTES + 100)}
    task_id = await create(client, large)
    small_id = await create(client, {"n": 1})
    _, [listed, small] = await every_page(client)
    assert listed["id"] == task_id and listed["input"] == {} and listed["elided"] == ["input"]
    assert small["id"] == small_id and small["input"] == {"n": 1} and "elided" not in small
    alone = await client.get(f"/api/v1/a2a/tasks/{task_id}", headers=auth(READ_TOKEN))
    assert (await alone.json())["input"] == large


async def test_a_task_page_stops_at_the_byte_budget_and_the_cursor_goes_on(client):
    ids = [await create(client, {"blob": "y" * 3000, "n": i}) for i in range(12)]
    sizes, tasks = await every_page(client)
    # 3 KB each, under the elision size: a 16 KiB page holds about five or six
    assert len(sizes) > 1 and max(sizes) <= PAGE_KB * 1024 // 3000 + 1
    assert [t["id"] for t in tasks] == ids
    assert all(t["input"]["blob"] == "y" * 3000 for t in tasks)


async def test_a_page_of_findings_stops_at_the_byte_budget(client):
    for i in range(6):
        body = {"agent": "worker", "severity": "low", "title": f"f{i}", "detail": "z" * 6000}
        response = await client.post("/api/v1/findings", json=body, headers=auth(OPERATE_TOKEN))
        assert response.status == 201
    seen, since, pages = [], 0, 0
    while True:
        response = await client.get(
            "/api/v1/findings", params={"since": since, "limit": 1000}, headers=auth(READ_TOKEN)
        )
        page = await response.json()
        if not page["findings"]:
            break
        pages += 1
        assert len(page["findings"]) <= 3  # 6 KB each: the third reaches 16 KiB
        seen += [f["title"] for f in page["findings"]]
        since = page["next_seq"]
    assert seen == [f"f{i}" for i in range(6)] and pages >= 2


async def test_a_page_of_pushed_envelopes_stops_at_the_byte_budget(client):
    for i in range(8):
        await create(client, {"blob": "w" * 3000, "n": i})
    seqs, since = [], 0
    while True:
        response = await client.get(
            "/api/v1/sync/envelopes/pushed",
            params={"agent": "worker", "since": since, "limit": 1000},
            headers=auth(),
        )
        assert response.status == 200
        envelopes = (await response.json())["envelopes"]
        if not envelopes:
            break
        assert sum(len(e["payload"]) for e in envelopes) < PAGE_KB * 1024 + 4 * 3000 * 2
        assert len(envelopes) < 8
        seqs += [e["seq"] for e in envelopes]
        since = envelopes[-1]["seq"]
    assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) >= 8


async def test_open_tasks_per_agent_are_capped_with_a_429(client):
    for i in range(30):
        await create(client, {"n": i})
    body = {"from": "planner", "to": "worker", "input": {}}
    refused = await client.post("/api/v1/a2a/tasks", json=body, headers=auth(OPERATE_TOKEN))
    assert refused.status == 429
    assert refused.content_type == "application/problem+json"
    problem = await refused.json()
    assert "max_open_tasks_per_agent" in problem["detail"] and "30" in problem["detail"]
    await create(client, {"n": 0}, to="helper")  # another agent's tasks are not counted


async def every_rest_page(client, path: str, token: str = READ_TOKEN) -> tuple[list[int], list]:
    """Follow `X-Next-Cursor` of a REST list to the end: each page's bytes, every item."""
    sizes, items, cursor = [], [], None
    while True:
        params = {"cursor": cursor} if cursor else {}
        response = await client.get(path, params=params, headers=auth(token))
        assert response.status == 200, await response.text()
        body = await response.read()
        sizes.append(len(body))
        items += await response.json()
        cursor = response.headers.get(NEXT_CURSOR)
        if cursor is None:
            return sizes, items


async def test_pending_approvals_and_their_groups_stop_at_the_byte_budget(client):
    store = client.app[CONTEXT].store
    request = json.dumps({"to": "acme", "note": "z" * 5000})
    for i in range(10):  # each about 5 KB, as a peer replicated them
        data = {"id": f"remote-{i}", "capability": "spend", "detail": "x", "request": request}
        data["request_hash"] = hash_request(request)
        [result] = await replicate(store, "remote-agent", "approval.requested", data)
        assert result.status == "accepted"
    sizes, listed = await every_rest_page(client, "/api/v1/approvals")
    assert [a["id"] for a in listed] == [f"remote-{i}" for i in range(10)]
    assert len(sizes) > 2 and max(sizes) <= PAGE_KB * 1024
    assert all(a["request"] == request for a in listed)  # the request is whole: it is decided on
    groups = (await (await client.get("/api/v1/approvals/batched", headers=auth())).json())[
        "groups"
    ]
    assert groups[0]["count"] == 10 and groups[0]["ids"] == [a["id"] for a in listed]
