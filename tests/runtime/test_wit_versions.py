"""Agents of both worlds on one node (node/runtime/witversion.py): a 0.2.0 agent learns who made
each task (`caller`) and whether `from` was only asserted; a 0.1.0 agent (every agent under
agents/ but one) keeps working beside it; MCP's tools/list of a large catalogue comes a page
at a time, bounded in bytes (node/runtime/mcp.py)."""

from __future__ import annotations

import httpx

from tests.polling import until
from tests.protocol_support import agent_toml, start_node, started
from tests.support import OPERATE_TOKEN, READ_TOKEN, auth

PAGE_KB = 4


async def test_a_v2_agent_knows_who_made_its_tasks_and_a_v1_agent_still_works(
    aiohttp_server, tmp_path, built_agents
):
    toml = agent_toml("caller", built_agents["caller"], "mcp = true") + agent_toml(
        "worker", built_agents["task_worker"]
    )
    node = await start_node(aiohttp_server, tmp_path, toml, node=f"page_max_kb = {PAGE_KB}\n")
    await started(node, "caller", "worker")
    async with httpx.AsyncClient(base_url=node.url, headers=auth(OPERATE_TOKEN)) as client:

        async def create(sender: str, to: str, task_input: dict) -> str:
            body = {"from": sender, "to": to, "input": task_input}
            created = await client.post("/api/v1/a2a/tasks", json=body)
            assert created.status_code == 201, created.text
            return created.json()["id"]

        async def output(task_id: str) -> dict:
            async def done() -> dict | None:
                read = await client.get(f"/api/v1/a2a/tasks/{task_id}", headers=auth(READ_TOKEN))
                task = read.json()
                assert task["status"] != "failed", task
                return task["output"] if task["status"] == "completed" else None

            return await until(done, timeout=30, what=f"task {task_id} completed")

        own = await create("operator", "caller", {})  # the token's own name
        claimed = await create("mallory", "caller", {})  # someone else's: only its word
        delegated = await create("operator", "worker", {"delegate_to": "caller"})
        summed = await create("operator", "worker", {"numbers": [1, 2, 3]})
        told = {"from": "operator", "caller": "operator", "from_asserted": False}
        assert await output(own) == told
        assert await output(claimed) == {
            "from": "mallory",
            "caller": "operator",
            "from_asserted": True,
        }
        # the 0.1.0 agent works as before: it sums, and it delegates to the 0.2.0 one, whose
        # task then comes from the agent itself, as the node saw it
        assert await output(summed) == {"sum": 6, "count": 3}
        handed = (await output(delegated))["delegated"]
        told = {"from": "worker", "caller": "worker", "from_asserted": False}
        assert await output(handed) == told

        # tools/list: 40 tools, pages of at most about PAGE_KB, each tool whole
        names, cursor, pages = [], None, 0
        while True:
            params = {"cursor": cursor} if cursor else {}
            call = {"jsonrpc": "2.0", "id": pages, "method": "tools/list", "params": params}
            answer = await client.post("/api/v1/mcp/caller", json=call)
            assert len(answer.content) < PAGE_KB * 1024 + 600
            listed = answer.json()["result"]
            names += [tool["name"] for tool in listed["tools"]]
            pages += 1
            cursor = listed.get("nextCursor")
            if cursor is None:
                break
        assert names == [f"tool-{i:02d}" for i in range(40)] and pages > 2
        bad = {"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {"cursor": "x"}}
        assert (await client.post("/api/v1/mcp/caller", json=bad)).json()["error"]["code"] == -32602
