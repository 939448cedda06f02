"""The MCP methods beyond tools, registered on the JSON-RPC server (node/runtime/mcp.py):
resources (the journal's, node/protocols/mcp_resources.py, and the agent's own where its
component exports them), their subscriptions, prompts and completion (the agent's exports,
node/protocols/mcp_agent_exports.py).

A subscription needs a session (node/protocols/mcp_sessions.py): its updates travel on the
session's GET stream. It is a filter on the node's event bus (node/streams/bus.py) for the
agent, which marks the session's subscribed URIs as updated as events go by and queues
nothing on the bus (the session's own queue is bounded and holds each URI once).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from node.protocols.mcp_content import (
    MAX_ITEMS,
    ContentError,
    prompt_result,
    resource_contents,
)
from node.protocols.mcp_resources import SCHEME, JournalResources, touched
from node.protocols.mcp_sessions import MAX_SUBSCRIPTIONS, McpSession
from node.runtime.mcp import McpServer
from node.runtime.mcp_exports import AgentExports, AgentResource
from node.runtime.runtime import AgentRuntime
from node.streams.bus import EventBus
from node.streams.frames import Item
from node.web.jsonrpc import INVALID_PARAMS, INVALID_REQUEST, RpcError

T = TypeVar("T")
MAX_COMPLETIONS = 100  # MCP's bound on one completion answer


class McpFeatures:
    def __init__(
        self,
        resources: JournalResources,
        runtime: Callable[[], AgentRuntime],
        bus: EventBus,
    ) -> None:
        self.resources = resources
        self.runtime = runtime
        self.bus = bus

    def exports(self) -> AgentExports:
        return AgentExports(self.runtime())

    def register(self, server: McpServer) -> None:
        self.redact: Callable[[str], str] = server.redact
        server.capabilities["resources"] = {"subscribe": True, "listChanged": False}
        server.capabilities["prompts"] = {"listChanged": False}
        server.capabilities["completions"] = {}
        server.methods.update(
            {
                "prompts/list": self.prompts,
                "prompts/get": self.prompt,
                "completion/complete": self.complete,
                "resources/list": self.list_resources,
                "resources/templates/list": self.templates,
                "resources/read": self.read,
                "resources/subscribe": self.subscribe,
                "resources/unsubscribe": self.unsubscribe,
            }
        )

    async def list_resources(
        self, agent: str, params: dict[str, Any], session: Any
    ) -> dict[str, Any]:
        _no_cursor(params)
        own = await self._agent_resources(agent, templates=False)
        return {"resources": self.resources.listed(agent) + [_listed(r, "uri") for r in own]}

    async def templates(self, agent: str, params: dict[str, Any], session: Any) -> dict[str, Any]:
        _no_cursor(params)
        own = await self._agent_resources(agent, templates=True)
        listed = self.resources.templates(agent) + [_listed(r, "uriTemplate") for r in own]
        return {"resourceTemplates": listed}

    async def _agent_resources(self, agent: str, templates: bool) -> list[AgentResource]:
        """The agent's own (world 0.3.0), bar any that would pass for the node's."""
        listed = await self._agent(self.exports().resources(agent, templates))
        return [r for r in listed if not r.uri.startswith(f"{SCHEME}:")][:MAX_ITEMS]

    async def read(self, agent: str, params: dict[str, Any], session: Any) -> dict[str, Any]:
        address = _uri(params)
        if self.resources.owns(agent, address):
            return self.resources.read(agent, self.runtime(), address)
        if not address.startswith(f"{SCHEME}:"):
            read = await self._agent(self.exports().read(agent, address))
            if read is not None and read.ok:
                try:
                    return {"contents": resource_contents(read.text, self.redact)}
                except ContentError as e:
                    raise RpcError(-32603, f"agent {agent} answered a bad resource: {e}") from e
        raise RpcError(-32002, f"no resource {address[:200]!r}", uri=address[:200])

    # ---- prompts and completion (the agent's exports, world 0.3.0)
    async def prompts(self, agent: str, params: dict[str, Any], session: Any) -> dict[str, Any]:
        _no_cursor(params)
        listed = await self._agent(self.exports().prompts(agent))
        return {
            "prompts": [
                {
                    "name": p.name,
                    "description": p.description,
                    "arguments": [
                        {"name": a.name, "description": a.description, "required": a.required}
                        for a in p.arguments
                    ],
                }
                for p in listed[:MAX_ITEMS]
            ]
        }

    async def prompt(self, agent: str, params: dict[str, Any], session: Any) -> dict[str, Any]:
        name, arguments = params.get("name"), params.get("arguments") or {}
        if not isinstance(name, str) or not name:
            raise RpcError(INVALID_PARAMS, "`name` must be a non-empty string")
        if not isinstance(arguments, dict) or not all(
            isinstance(v, str) for v in arguments.values()
        ):
            raise RpcError(INVALID_PARAMS, "`arguments` must be an object of strings")
        if name not in {p.name for p in await self._agent(self.exports().prompts(agent))}:
            raise RpcError(INVALID_PARAMS, f"unknown prompt {name[:200]!r}")
        got = await self._agent(self.exports().prompt(agent, name, json.dumps(arguments)))
        if got is None or not got.ok:
            raise RpcError(INVALID_PARAMS, f"prompt {name}: {got.text if got else 'none'}"[:1000])
        try:
            return prompt_result(got.text, self.redact)
        except ContentError as e:
            raise RpcError(-32603, f"agent {agent} answered a bad prompt: {e}") from e

    async def complete(self, agent: str, params: dict[str, Any], session: Any) -> dict[str, Any]:
        ref, argument = params.get("ref"), params.get("argument")
        if not isinstance(ref, dict) or not isinstance(argument, dict):
            raise RpcError(INVALID_PARAMS, "`ref` and `argument` must be objects")
        name, value = argument.get("name"), argument.get("value", "")
        if not isinstance(name, str) or not isinstance(value, str):
            raise RpcError(INVALID_PARAMS, "`argument` needs a string `name` and `value`")
        values: list[str] = []
        if ref.get("type") == "ref/prompt" and isinstance(ref.get("name"), str):
            values = await self._agent(
                self.exports().complete(agent, ref["name"], name, value[:4096])
            )
        elif ref.get("type") != "ref/resource":
            raise RpcError(INVALID_PARAMS, "`ref.type` must be ref/prompt or ref/resource")
        values = [self.redact(v) for v in values if isinstance(v, str)]
        shown = values[:MAX_COMPLETIONS]
        return {
            "completion": {
                "values": shown,
                "total": len(values),
                "hasMore": len(values) > len(shown),
            }
        }

    async def _agent(self, call: Awaitable[T]) -> T:
        """An export's answer; a trap or an agent that is not running is -32603."""
        try:
            return await call
        except RpcError:
            raise
        except Exception as e:
            raise RpcError(-32603, f"the agent could not answer: {e}"[:1000]) from e

    async def subscribe(self, agent: str, params: dict[str, Any], session: Any) -> dict[str, Any]:
        address = _uri(params)
        if not isinstance(session, McpSession):
            raise RpcError(
                INVALID_REQUEST,
                "resources/subscribe needs a session: send the Mcp-Session-Id that initialize "
                "answered with (updates arrive on the session's GET stream)",
            )
        if address not in session.subscriptions and len(session.subscriptions) >= MAX_SUBSCRIPTIONS:
            raise RpcError(
                INVALID_PARAMS, f"a session subscribes to {MAX_SUBSCRIPTIONS} URIs at most"
            )
        session.subscriptions.add(address)
        if not session.on_end:  # the first subscription: follow the agent's events
            self._follow(agent, session)
        return {}

    async def unsubscribe(self, agent: str, params: dict[str, Any], session: Any) -> dict[str, Any]:
        address = _uri(params)
        if isinstance(session, McpSession):
            session.subscriptions.discard(address)
        return {}

    def _follow(self, agent: str, session: McpSession) -> None:
        def mark(item: Item) -> bool:
            for address in touched(agent, item.name, item.data):
                session.resource_updated(address)
            return False  # nothing is queued on the bus: the session keeps what to send

        subscription = self.bus.subscribe("events", agent=agent, accept=mark)
        session.on_end.append(lambda: self.bus.unsubscribe(subscription))


def _listed(resource: AgentResource, key: str) -> dict[str, Any]:
    listed = {key: resource.uri, "name": resource.name, "description": resource.description}
    if resource.mime_type:
        listed["mimeType"] = resource.mime_type
    return listed


def _uri(params: dict[str, Any]) -> str:
    address = params.get("uri")
    if not isinstance(address, str) or not address or len(address) > 2048:
        raise RpcError(INVALID_PARAMS, "`uri` must be a non-empty string of at most 2048 bytes")
    return address


def _no_cursor(params: dict[str, Any]) -> None:
    cursor = params.get("cursor")
    if cursor is not None:
        raise RpcError(INVALID_PARAMS, "`cursor` is not one this server gave (one page only)")
