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

from collections.abc import Callable
from typing import Any

from node.protocols.mcp_resources import JournalResources, touched
from node.protocols.mcp_sessions import MAX_SUBSCRIPTIONS, McpSession
from node.runtime.mcp import McpServer
from node.runtime.runtime import AgentRuntime
from node.streams.bus import EventBus
from node.streams.frames import Item
from node.web.jsonrpc import INVALID_PARAMS, INVALID_REQUEST, RpcError


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

    def register(self, server: McpServer) -> None:
        server.capabilities["resources"] = {"subscribe": True, "listChanged": False}
        server.methods.update(
            {
                "resources/list": self.list,
                "resources/templates/list": self.templates,
                "resources/read": self.read,
                "resources/subscribe": self.subscribe,
                "resources/unsubscribe": self.unsubscribe,
            }
        )

    async def list(self, agent: str, params: dict[str, Any], session: Any) -> dict[str, Any]:
        _no_cursor(params)
        return {"resources": self.resources.listed(agent)}

    async def templates(self, agent: str, params: dict[str, Any], session: Any) -> dict[str, Any]:
        _no_cursor(params)
        return {"resourceTemplates": self.resources.templates(agent)}

    async def read(self, agent: str, params: dict[str, Any], session: Any) -> dict[str, Any]:
        address = _uri(params)
        if self.resources.owns(agent, address):
            return self.resources.read(agent, self.runtime(), address)
        raise RpcError(-32002, f"no resource {address[:200]!r}", uri=address[:200])

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


def _uri(params: dict[str, Any]) -> str:
    address = params.get("uri")
    if not isinstance(address, str) or not address or len(address) > 2048:
        raise RpcError(INVALID_PARAMS, "`uri` must be a non-empty string of at most 2048 bytes")
    return address


def _no_cursor(params: dict[str, Any]) -> None:
    cursor = params.get("cursor")
    if cursor is not None:
        raise RpcError(INVALID_PARAMS, "`cursor` is not one this server gave (one page only)")
