"""MCP with the official `mcp` SDK client (2.x, streamable HTTP) against /api/v1/mcp/{agent}.

The SDK's default `auto` mode first probes `server/discover` (the 2026 sessionless era); the
node answers -32601 and the client falls back to the `initialize` handshake, all inside one
connect. The raw protocol answers (codes, 202 for notifications, 405 on GET, 404 without
mcp = true) are tested in tests/runtime/test_runtime_node.py::test_mcp_endpoint.
"""

from __future__ import annotations

import json

import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from tests.protocol_support import (
    agent_toml,
    start_node,
    started,
)
from tests.support import OPERATE_TOKEN, auth


@pytest.fixture
async def node(aiohttp_server, tmp_path, built_agents):
    node = await start_node(
        aiohttp_server, tmp_path, agent_toml("tools", built_agents["mcp_tools"], "mcp = true")
    )
    await started(node, "tools")
    return node


class Recorder:
    """The JSON-RPC methods the client POSTs, in order (an httpx2 request hook)."""

    def __init__(self) -> None:
        self.methods: list[str] = []

    async def __call__(self, request: httpx2.Request) -> None:
        if request.method == "POST":
            self.methods.append(json.loads(request.content)["method"])


def connect(url: str, recorder: Recorder, mode: str = "auto") -> Client:
    http = httpx2.AsyncClient(headers=auth(OPERATE_TOKEN), event_hooks={"request": [recorder]})
    return Client(streamable_http_client(url, http_client=http), mode=mode)


async def test_auto_mode_falls_back_from_discover_and_calls_tools(node):
    recorder = Recorder()
    async with connect(f"{node.url}/api/v1/mcp/tools", recorder) as client:
        assert recorder.methods[:2] == ["server/discover", "initialize"]  # probe, fallback
        assert client.protocol_version == "2025-11-25"
        assert client.server_info is not None and client.server_info.name == "tools"
        assert client.server_capabilities.tools is not None

        listed = await client.list_tools()
        assert [t.name for t in listed.tools] == ["add", "divide", "remember"]
        assert listed.tools[0].input_schema["required"] == ["a", "b"]

        added = await client.call_tool("add", {"a": 20, "b": 22})
        assert not added.is_error and json.loads(added.content[0].text) == {"result": 42}

        failed = await client.call_tool("divide", {"a": 1, "b": 0})  # the tool's own failure
        assert failed.is_error and failed.content[0].text == "division by zero"

        with pytest.raises(MCPError) as unknown:  # a protocol fault: not a tool result
            await client.call_tool("nope", {})
        assert unknown.value.error.code == -32602

        remembered = await client.call_tool("remember", {"note": "pay the rent"})
        assert not remembered.is_error
    assert "notifications/initialized" in recorder.methods
    notes = [
        e.event.data["value"]
        for e in node.ctx.store.iter_stream("tools")
        if e.event.type == "state.set"
    ]
    assert notes == ["pay the rent"]  # a tool call is journaled like any other host call


async def test_legacy_mode_handshakes_directly(node):
    recorder = Recorder()
    async with connect(f"{node.url}/api/v1/mcp/tools", recorder, mode="legacy") as client:
        await client.list_tools()
    assert recorder.methods[0] == "initialize" and "tools/list" in recorder.methods
    assert "server/discover" not in recorder.methods
