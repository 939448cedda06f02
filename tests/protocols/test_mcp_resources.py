"""An agent's journal as MCP resources, through the official `mcp` SDK client: list, read
(status, durable state per key, findings and logs paged by seq), subscribe (an update arrives on
the session's GET stream after a tick writes, and after a finding is posted), and the session
rules of the transport (another token's session id is a 404, DELETE ends it, GET without one
is 405 as before sessions)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from node.runtime.agents import AGENTS
from tests.protocol_support import agent_toml, start_node, started
from tests.support import ADMIN_TOKEN, OPERATE_TOKEN, auth

# the SDK warns that a protocol after the ones the node speaks replaces subscriptions
pytestmark = pytest.mark.filterwarnings("ignore:resources/(un)?subscribe is removed")
STATE = "agent://counter/state/count"
FINDINGS = "agent://counter/findings"


@pytest.fixture
async def node(aiohttp_server, tmp_path, built_agents):
    node = await start_node(
        aiohttp_server, tmp_path, agent_toml("counter", built_agents["counter"], "mcp = true")
    )
    await started(node, "counter")
    return node


def connect(node, **kwargs: Any) -> Client:
    http = httpx2.AsyncClient(headers=auth(OPERATE_TOKEN), timeout=30)
    url = f"{node.url}/api/v1/mcp/counter"
    return Client(streamable_http_client(url, http_client=http), mode="legacy", **kwargs)


async def tick(node) -> None:
    await asyncio.wrap_future(node.app[AGENTS].runtime.tick_now("counter", "test"))


def read_json(result) -> Any:
    (content,) = result.contents
    assert content.mime_type == "application/json"
    return json.loads(content.text)


async def test_the_journal_is_read_and_followed_as_resources(node):
    updated: list[str] = []
    arrived = asyncio.Event()

    async def on_message(message: Any) -> None:
        root = getattr(message, "root", message)
        params = getattr(root, "params", None)
        if getattr(root, "method", "") == "notifications/resources/updated":
            updated.append(str(params.uri))
            arrived.set()

    async with connect(node, message_handler=on_message) as client:
        assert client.server_capabilities.resources.subscribe is True
        listed = {str(r.uri) for r in (await client.list_resources()).resources}
        assert {f"agent://counter/{p}" for p in ("status", "state", "findings", "logs")} <= listed
        templates = {
            t.uri_template for t in (await client.list_resource_templates()).resource_templates
        }
        assert "agent://counter/state/{key}" in templates

        await tick(node)  # the agent ticked once at its start: this is its second
        assert read_json(await client.read_resource(STATE)) == {"key": "count", "value": "2"}
        assert read_json(await client.read_resource("agent://counter/state")) == {"keys": ["count"]}
        logs = read_json(await client.read_resource("agent://counter/logs"))
        assert [entry["message"] for entry in logs["logs"]] == ["tick 1", "tick 2"]
        first = read_json(await client.read_resource("agent://counter/logs?limit=1"))
        assert [entry["message"] for entry in first["logs"]] == ["tick 1"]
        rest = read_json(
            await client.read_resource(f"agent://counter/logs?since={first['next_seq']}")
        )
        assert [entry["message"] for entry in rest["logs"]] == ["tick 2"]
        # paged by seq: nothing after the last one
        after = read_json(
            await client.read_resource(f"agent://counter/logs?since={logs['next_seq']}")
        )
        assert after["logs"] == [] and after["next_seq"] == logs["next_seq"]
        status = read_json(await client.read_resource("agent://counter/status"))
        assert status["name"] == "counter"

        with pytest.raises(MCPError) as missing:
            await client.read_resource("agent://counter/state/nope")
        assert missing.value.error.code == -32002

        await client.subscribe_resource(STATE)
        await client.subscribe_resource(FINDINGS)
        await tick(node)  # the tick's state.set reaches the session's GET stream
        await asyncio.wait_for(arrived.wait(), 10)
        assert STATE in updated
        assert read_json(await client.read_resource(STATE))["value"] == "3"

        arrived.clear()
        async with httpx.AsyncClient(headers=auth(OPERATE_TOKEN)) as http:
            posted = await http.post(
                f"{node.url}/api/v1/findings",
                json={"agent": "counter", "severity": "high", "title": "seen", "detail": "x"},
            )
            assert posted.status_code == 201
        await asyncio.wait_for(arrived.wait(), 10)
        assert FINDINGS in updated
        findings = read_json(await client.read_resource(FINDINGS))["findings"]
        assert [(f["title"], f["severity"], f["posted_by"]) for f in findings] == [
            ("seen", "high", "operator")
        ]

        await client.unsubscribe_resource(STATE)
        await client.unsubscribe_resource(FINDINGS)


async def test_a_session_is_its_tokens_and_ends_with_delete(node):
    url = f"{node.url}/api/v1/mcp/counter"
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}}
    subscribe = {"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe"}
    subscribe["params"] = {"uri": STATE}
    async with httpx.AsyncClient(timeout=30) as http:
        opened = await http.post(url, json=init, headers=auth(OPERATE_TOKEN))
        session = opened.headers["Mcp-Session-Id"]
        mine = {**auth(OPERATE_TOKEN), "Mcp-Session-Id": session}
        assert (await http.post(url, json=subscribe, headers=mine)).json()["result"] == {}
        # another token showing the id: as if it did not exist
        theirs = {**auth(ADMIN_TOKEN), "Mcp-Session-Id": session}
        stolen = await http.post(url, json=subscribe, headers=theirs)
        assert stolen.status_code == 404 and "session" in stolen.json()["detail"]
        # a subscription needs a session; a plain request stands alone, as before sessions
        alone = await http.post(url, json=subscribe, headers=auth(OPERATE_TOKEN))
        assert alone.json()["error"]["code"] == -32600
        assert (await http.get(url, headers=auth(OPERATE_TOKEN))).status_code == 405
        # the session's GET stream: numbered events, resumable; a new one replaces the old
        async with http.stream("GET", url, headers=mine) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            await tick(node)
            lines = stream.aiter_lines()
            event = [await anext(lines), await anext(lines)]
        assert event[0] == "id: 1"
        sent = json.loads(event[1].removeprefix("data: "))
        assert sent == {
            "jsonrpc": "2.0",
            "method": "notifications/resources/updated",
            "params": {"uri": STATE},
        }
        async with http.stream("GET", url, headers={**mine, "Last-Event-ID": "0"}) as resumed:
            lines = resumed.aiter_lines()
            assert [await anext(lines), await anext(lines)] == event
        assert (await http.delete(url, headers=mine)).status_code == 204
        gone = await http.post(url, json=subscribe, headers=mine)
        assert gone.status_code == 404
        assert (await http.get(url, headers=mine)).status_code == 404
