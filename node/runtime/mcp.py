"""MCP over JSON-RPC 2.0 for one agent: `tools/list` → `list-tools`, `tools/call` → `call-tool`.

Also `initialize`, `ping` and notifications, so the official `mcp` SDK client can connect.
`tools/list` answers a page at a time, bounded in bytes (`nextCursor` goes on). Tool
failures (the agent's `err`) are results with `isError: true`; JSON-RPC errors are for
protocol faults: -32700 unparsable JSON, -32600 not a request, -32601 unknown method,
-32602 bad params or unknown tool, -32603 the agent trapped or is unavailable. Transport-free:
the HTTP route hands the body in and sends back what comes out (None: 202, no body).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import msgspec

from node.ops.version import __version__
from node.runtime.hostapi import Tool
from node.runtime.runtime import AgentRuntime
from node.web import jsonrpc as rpc
from node.web.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND, RpcError
from node.web.pages import byte_page

log = logging.getLogger(__name__)

LATEST_PROTOCOL = "2025-11-25"
KNOWN_PROTOCOLS = ("2024-11-05", "2025-03-26", "2025-06-18", LATEST_PROTOCOL)


def tool_json(tool: Tool) -> dict[str, Any]:
    try:
        schema = json.loads(tool.input_schema)
    except ValueError:
        schema = None
    if not isinstance(schema, dict):
        schema = {}
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    schema.setdefault("required", [])
    return {"name": tool.name, "description": tool.description, "inputSchema": schema}


class McpServer:
    """Answers JSON-RPC messages for the agents of `runtime` (the route checks `mcp = true`)."""

    def __init__(
        self,
        runtime: AgentRuntime,
        publish: Any = None,
        redact: Any = None,
        page_bytes: int = 1 << 20,
    ) -> None:
        self.runtime = runtime
        self.page_bytes = page_bytes  # a tools/list page stops near this size (its cursor goes on)
        emit = publish or (lambda agent, event, data: None)
        # secret values agents have read stay out of tool results and tool-call events
        self.redact = redact or (lambda value: value)
        self.publish: Callable[[str, str, dict[str, Any]], None] = lambda agent, event, data: emit(
            agent, event, self.redact(data)
        )

    async def handle(self, agent: str, body: bytes) -> dict[str, Any] | None:
        """The response to send, or None for a notification (accepted, never answered)."""
        call = rpc.parse(body, notifications=True)
        if isinstance(call, dict):
            return call
        if call.notification:
            return None
        try:
            result = await self._dispatch(agent, call.method, call.params)
        except RpcError as e:
            return rpc.error_response(call.id, e)
        return rpc.result_response(call.id, result)

    async def _dispatch(self, agent: str, method: str, params: dict[str, Any]) -> Any:
        if method == "initialize":
            asked = params.get("protocolVersion")
            return {
                "protocolVersion": asked if asked in KNOWN_PROTOCOLS else LATEST_PROTOCOL,
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": agent, "version": __version__},
            }
        if method == "ping":
            return {}
        if method == "tools/list":
            return await self._list(agent, params)
        if method == "tools/call":
            return await self._call(agent, params)
        raise RpcError(METHOD_NOT_FOUND, f"method {method!r} not found")

    async def _list(self, agent: str, params: dict[str, Any]) -> dict[str, Any]:
        """A page of the agent's tools, bounded in bytes (node/web/pages.py): a tool is never
        cut (a client needs its whole schema), the next page starts at `nextCursor`."""
        cursor = params.get("cursor") or "0"
        if not isinstance(cursor, str) or not cursor.isdigit() or len(cursor) > 9:
            raise RpcError(INVALID_PARAMS, "`cursor` is not one this server gave")
        start = int(cursor)
        tools = await self._tools(agent)
        page, more = byte_page((tool_json(t) for t in tools[start:]), self.page_bytes)
        listed: dict[str, Any] = {"tools": [msgspec.Raw(tool) for tool in page]}
        if more:
            listed["nextCursor"] = str(start + len(page))
        return listed

    async def _tools(self, agent: str) -> list[Tool]:
        try:
            return await self.runtime.list_tools(agent)
        except Exception as e:
            raise RpcError(INTERNAL_ERROR, f"agent {agent} could not list its tools: {e}") from e

    async def _call(self, agent: str, params: dict[str, Any]) -> dict[str, Any]:
        name, arguments = params.get("name"), params.get("arguments", {})
        if arguments is None:
            arguments = {}
        if not isinstance(name, str) or not name:
            raise RpcError(INVALID_PARAMS, "`name` must be a non-empty string")
        if not isinstance(arguments, dict):
            raise RpcError(INVALID_PARAMS, "`arguments` must be an object")
        if name not in {t.name for t in await self._tools(agent)}:
            raise RpcError(INVALID_PARAMS, f"unknown tool {name!r}")
        self.publish(agent, "tool_call_start", {"agent": agent, "tool": name, "args": arguments})
        try:
            result = await self.runtime.call_tool(agent, name, json.dumps(arguments))
        except Exception as e:
            self.publish(
                agent, "tool_call_end", {"agent": agent, "tool": name, "result": f"error: {e}"}
            )
            raise RpcError(INTERNAL_ERROR, f"agent {agent} failed: {e}") from e
        text = self.redact(result.text)
        self.publish(agent, "tool_call_end", {"agent": agent, "tool": name, "result": text})
        return {"content": [{"type": "text", "text": text}], "isError": not result.ok}
