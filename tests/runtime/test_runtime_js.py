"""The JavaScript example agent (agents/js_hello, built with componentize-js by
scripts/build-agents) on a real node: its log lines, stdout, a task and an MCP tool."""

from __future__ import annotations

import pytest

from node.runtime.compiled_cache import COMPILED_CACHE_ENV
from tests.polling import until
from tests.runtime.test_runtime_node import agent_toml, journal, start_node
from tests.runtime_support import COMPILED_CACHE
from tests.support import OPERATE_TOKEN, READ_TOKEN, auth


@pytest.fixture(autouse=True)
def compiled_cache(monkeypatch):
    """The session compiled js_hello already (a cold compile takes tens of seconds)."""
    monkeypatch.setenv(COMPILED_CACHE_ENV, str(COMPILED_CACHE))


async def test_js_hello_runs_on_a_node(aiohttp_client, tmp_path, built_agents):
    toml = agent_toml("js_hello", built_agents["js_hello"], "tick_interval_ms = 100\nmcp = true")
    app, client, _ = await start_node(aiohttp_client, tmp_path, toml)
    await until(lambda: len(journal(app, "js_hello", "log")) >= 4, 60, "js_hello ticked twice")
    messages = [e["message"] for e in journal(app, "js_hello", "log")]
    assert messages[:2] == ["hello from a JavaScript agent, tick 1", "js_hello on stdout"]
    assert "hello from a JavaScript agent, tick 2" in messages
    states = journal(app, "js_hello", "state.set")
    assert states[:2] == [
        {"type": "state.set", "key": "ticks", "value": "1"},
        {"type": "state.set", "key": "ticks", "value": "2"},
    ]
    assert not journal(app, "js_hello", "agent.errored")

    created = await client.post(
        "/api/v1/a2a/tasks",
        json={"from": "ops", "to": "js_hello", "input": {"name": "Ada"}},
        headers=auth(OPERATE_TOKEN),
    )
    assert created.status == 201, await created.text()
    task_id = (await created.json())["id"]

    async def finished() -> dict | None:
        got = await client.get(f"/api/v1/a2a/tasks/{task_id}", headers=auth(READ_TOKEN))
        task = await got.json()
        return task if task["status"] in ("completed", "failed") else None

    task = await until(finished, 30, "the task ended")
    assert task["status"] == "completed" and task["output"] == {"greeting": "hello, Ada"}
