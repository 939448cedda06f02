"""MCP over JSON-RPC 2.0 for one agent: `tools/list` → `list-tools`, `tools/call` → `call-tool`.

Also `initialize`, `ping`, `logging/setLevel` and notifications, so the official `mcp` SDK
client can connect. `tools/list` answers a page at a time, bounded in bytes (`nextCursor`
goes on). Logging (with progress) is served here: what the agent logs while a tool runs is
sent to the caller as `notifications/message`, and what it reports with `task-progress("", ...)`
as `notifications/progress` (mcp_notices.py); the minimum level is kept per token and agent, in
memory. Resources, prompts and completion are methods other modules register in `methods`
(node/protocols/mcp_features.py); sessions and elicitation are the transport's
(node/api/mcp.py, docs/protocols/mcp.md).
Tool failures (the agent's `err`) are results with `isError: true`; JSON-RPC errors are for
protocol faults: -32700 unparsable JSON, -32600 not a request, -32601 unknown method,
-32602 bad params or unknown tool, -32603 the agent trapped or is unavailable. Transport-free:
the HTTP route hands the body in and sends back what comes out (None: 202, no body).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from node.ops.version import __version__
from node.protocols.mcp_content import ContentError, content_items
from node.runtime.hostapi import Tool
from node.runtime.mcp_notices import DEFAULT_LEVEL, MCP_LEVELS, CallNotices
from node.runtime.runtime import AgentRuntime
from node.web import jsonrpc as rpc
from node.web.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND, RpcError
from node.web.pages import byte_page

log = logging.getLogger(__name__)

LATEST_PROTOCOL = "2025-11-25"
KNOWN_PROTOCOLS = ("2024-11-05", "2025-03-26", "2025-06-18", LATEST_PROTOCOL)
CAPABILITIES = {"tools": {"listChanged": False}, "logging": {}}
# a method another module serves (resources, prompts, completion: node/protocols/mcp_features.py):
# (agent, params, the caller's session or None) → the result
Method = Callable[[str, dict[str, Any], Any], Awaitable[Any]]


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
        # the minimum log level a caller asked for, by (token name, agent)
        self.levels: dict[tuple[str, str], str] = {}
        self.capabilities: dict[str, Any] = dict(CAPABILITIES)
        self.methods: dict[str, Method] = {}

    async def handle(self, agent: str, body: bytes, caller: str = "") -> dict[str, Any] | None:
        """The response to send, or None for a notification (accepted, never answered)."""
        call = rpc.parse(body, notifications=True)
        if isinstance(call, dict):
            return call
        if call.notification:
            return None
        return await self.answer(agent, call, caller)

    async def answer(
        self,
        agent: str,
        call: rpc.Call,
        caller: str,
        notices: CallNotices | None = None,
        session: Any = None,
    ) -> dict[str, Any]:
        """The response to one request; `notices` (a tools/call answered as a stream) gets
        what the agent logs and reports while the tool runs; `session` is the caller's MCP
        session (node/protocols/mcp_sessions.py), None for a request that stands alone."""
        try:
            extra = self.methods.get(call.method)
            if extra is not None:
                return rpc.result_response(call.id, await extra(agent, call.params, session))
            result = await self._dispatch(agent, call.method, call.params, caller, notices)
        except RpcError as e:
            return rpc.error_response(call.id, e)
        return rpc.result_response(call.id, result)

    def notices(self, agent: str, call: rpc.Call, caller: str) -> CallNotices:
        meta = call.params.get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        if not isinstance(token, str | int) or isinstance(token, bool):
            token = None
        level = self.levels.get((caller, agent), DEFAULT_LEVEL)
        return CallNotices(asyncio.get_running_loop(), agent, level, token)

    async def _dispatch(
        self,
        agent: str,
        method: str,
        params: dict[str, Any],
        caller: str,
        notices: CallNotices | None,
    ) -> Any:
        if method == "initialize":
            asked = params.get("protocolVersion")
            return {
                "protocolVersion": asked if asked in KNOWN_PROTOCOLS else LATEST_PROTOCOL,
                "capabilities": self.capabilities,
                "serverInfo": {"name": agent, "version": __version__},
            }
        if method == "ping":
            return {}
        if method == "logging/setLevel":
            level = params.get("level")
            if level not in MCP_LEVELS:
                raise RpcError(INVALID_PARAMS, f"`level` must be one of {', '.join(MCP_LEVELS)}")
            self.levels[(caller, agent)] = level
            return {}
        if method == "tools/list":
            return await self._list(agent, params)
        if method == "tools/call":
            return await self._call(agent, params, notices)
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

    async def _call(
        self, agent: str, params: dict[str, Any], notices: CallNotices | None
    ) -> dict[str, Any]:
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
            result = await self.runtime.call_tool(agent, name, json.dumps(arguments), notices)
        except Exception as e:
            self.publish(
                agent, "tool_call_end", {"agent": agent, "tool": name, "result": f"error: {e}"}
            )
            raise RpcError(INTERNAL_ERROR, f"agent {agent} failed: {e}") from e
        text = self.redact(result.text)
        self.publish(agent, "tool_call_end", {"agent": agent, "tool": name, "result": text})
        if result.content:  # world 0.3.0's content items: the agent's, checked (mcp_content.py)
            try:
                return {"content": content_items(result.text, self.redact), "isError": False}
            except ContentError as e:
                refused = f"agent {agent} answered content MCP does not take: {e}"
                return {"content": [{"type": "text", "text": refused}], "isError": True}
        return {"content": [{"type": "text", "text": text}], "isError": not result.ok}
