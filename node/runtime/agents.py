"""The node's agents as the other areas reach them: a typed slot for the runtime, which exists
only between start-up and shutdown."""

from __future__ import annotations

from aiohttp import web

from node.runtime.mcp import McpServer
from node.runtime.runtime import AgentRuntime
from node.runtime.startup import StartupProgress
from node.web.http import Problem


class Agents:
    """The node's agents: the runtime and its MCP server while the node runs (they exist from
    start-up to shutdown only, since the runtime starts threads and needs the event loop)."""

    def __init__(self) -> None:
        self._runtime: AgentRuntime | None = None
        self._mcp: McpServer | None = None
        self.startup: StartupProgress | None = None  # the agents started at boot (logged)

    @property
    def running(self) -> bool:
        return self._runtime is not None

    @property
    def runtime(self) -> AgentRuntime:
        if self._runtime is None:
            raise Problem(503, "the agent runtime is not running")
        return self._runtime

    @property
    def mcp(self) -> McpServer:
        if self._mcp is None:
            raise Problem(503, "the agent runtime is not running")
        return self._mcp

    def statuses(self) -> list[tuple[str, str]]:
        """(agent, status) as the runtime reads them now."""
        return [(s.name, s.status) for s in self.runtime.statuses()]

    def attach(self, runtime: AgentRuntime | None, mcp: McpServer | None) -> None:
        self._runtime, self._mcp = runtime, mcp


AGENTS = web.AppKey("agents", Agents)


def log_agents_starting(app: web.Application) -> None:
    """Called by the server right after its ready line: the agents still starting (startup.py)."""
    agents = app.get(AGENTS)
    if agents is not None and agents.startup is not None:
        agents.startup.log_after_ready()
