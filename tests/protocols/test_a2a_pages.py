"""ListTasks is bounded in bytes as REST's lists are (node/protocols/a2a_pages.py): large parts
are left out of the list and named, the page stops near `page_max_kb`, its token goes on, and
GetTask still returns the task whole."""

from __future__ import annotations

import httpx

from tests.protocol_support import agent_toml, start_node
from tests.support import OPERATE_TOKEN, READ_TOKEN, auth, tiny_component

PAGE_KB = 8
TASKS = 30


async def test_list_tasks_leaves_large_parts_out_and_pages_by_bytes(aiohttp_server, tmp_path):
    component = tmp_path / "agent.wasm"
    tiny_component(component)  # never runs a task: each stays pending with its input
    node = await start_node(
        aiohttp_server, tmp_path, agent_toml("worker", component), node=f"page_max_kb = {PAGE_KB}\n"
    )
    async with httpx.AsyncClient(base_url=node.url, timeout=30) as client:
        for i in range(TASKS):
            body = {"from": "operator", "to": "worker", "input": {"blob": "y" * 30_000, "n": i}}
            created = await client.post("/api/v1/a2a/tasks", json=body, headers=auth(OPERATE_TOKEN))
            assert created.status_code == 201, created.text

        seen, token, pages = [], "", 0
        while True:
            call = {"jsonrpc": "2.0", "id": pages, "method": "ListTasks"}
            call["params"] = {"pageSize": 100, **({"pageToken": token} if token else {})}
            answer = await client.post("/a2a/worker", json=call, headers=auth(READ_TOKEN))
            assert len(answer.content) < PAGE_KB * 1024 + 2048, len(answer.content)
            result = answer.json()["result"]
            assert result["totalSize"] == TASKS
            for task in result["tasks"]:
                assert task["metadata"]["elided"] == ["history"]
                (part,) = task["history"][0]["parts"]
                assert part["metadata"]["elided"] > 30_000 and "GetTask" in part["text"]
            seen += [task["id"] for task in result["tasks"]]
            pages += 1
            token = result["nextPageToken"]
            if not token:
                break
        assert len(set(seen)) == TASKS and pages > 1

        get = {"jsonrpc": "2.0", "id": 99, "method": "GetTask", "params": {"id": seen[0]}}
        whole = (await client.post("/a2a/worker", json=get, headers=auth(READ_TOKEN))).json()
        (part,) = whole["result"]["history"][0]["parts"]
        assert len(part["data"]["blob"]) == 30_000 and "elided" not in whole["result"]["metadata"]
