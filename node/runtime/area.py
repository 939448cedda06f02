"""The runtime as an area of the node: its lifecycle, GET /api/v1/status and the MCP endpoint.

Add this module to node.app's AREAS after the journal is set up. The lifecycle starts one
worker per [[agents]] entry once the journal is open, feeds task events to the delivery
queue, and stops every agent (blocking, so in a thread) before the journal closes.
Services of other areas are found in `ctx.services` when present: "approvals" (the gate),
"grants", "tasks" (task creation), "bus" (the SSE event sink), "registry" (components).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from node.api.params import json_response
from node.auth import add_route
from node.config import ConfigError
from node.context import CONTEXT, NodeContext, context_of
from node.errors import Problem
from node.runtime.capabilities import Capabilities
from node.runtime.host import EventSink, HostServices, JournalHost, NullSink
from node.runtime.inference import InferenceClient
from node.runtime.mcp import McpServer
from node.runtime.runtime import AgentRuntime
from node.runtime.spec import AgentSpec, RuntimeOptions, spec_from_config
from node.runtime.tasks import TaskQueue

RUNTIME = "runtime"  # ctx.services key
COMPILED_DIR = "compiled"  # under data_dir: the compiled-component cache
# Another folder for that cache, e.g. one shared by several nodes (or test runs) on a host.
COMPILED_CACHE_ENV = "AGENT_NODE_COMPILED_CACHE"
OUTPUT_DIR = "agent-output"  # under data_dir: agents' stdout/stderr files while they run


def setup(app: web.Application) -> None:
    app.cleanup_ctx.append(runtime_lifecycle)
    add_route(app, "GET", "/api/v1/status", status, "read")
    add_route(app, "POST", "/api/v1/mcp/{agent}", mcp, "operate")
    add_route(app, "GET", "/api/v1/mcp/{agent}", mcp_get, "operate")


def runtime_of(ctx: NodeContext) -> AgentRuntime:
    runtime = ctx.services.get(RUNTIME)
    if runtime is None:
        raise Problem(503, "the agent runtime is not running")
    return runtime


def refuse_replicas(ctx: NodeContext) -> None:
    """A journal has one writer: an agent whose journal came from another node is not ours."""
    journals = ctx.projections["journals"]
    for agent in ctx.config.agents:
        home = journals.home_of(agent.name)
        if home not in (None, ctx.name):
            raise ConfigError(
                f"agents: {agent.name!r} is hosted on node {home!r} (its journal was written "
                "there); agent names must be unique across the mesh"
            )


async def runtime_lifecycle(app: web.Application) -> AsyncIterator[None]:
    ctx = app[CONTEXT]
    config = ctx.config
    refuse_replicas(ctx)
    loop = asyncio.get_running_loop()
    session = aiohttp.ClientSession()
    names = [a.name for a in config.agents]
    tasks = TaskQueue(names)
    read_model = ctx.projections["tasks"]
    for name in names:  # unfinished tasks from before a restart are delivered again
        tasks.seed(
            name,
            (
                (t.id, t.from_, t.input)
                for t in read_model.list(None, name)
                if t.status in ("pending", "running")
            ),
        )
    services = HostServices(
        config=config,
        store=ctx.store,
        metrics=ctx.metrics,
        loop=loop,
        capabilities=Capabilities(session, config.actions),
        inference=InferenceClient(session, config.inference),
        tasks=tasks,
        approvals=ctx.services.get("approvals"),
        grants=ctx.services.get("grants"),
        task_creator=ctx.services.get("tasks"),
        sink=_sink(ctx.services.get("bus")),
    )

    def host_factory(spec: AgentSpec, stopping: Any) -> tuple[JournalHost, JournalHost]:
        agent = config.agent(spec.name)
        assert agent is not None
        host = JournalHost(agent, services, stopping)
        return host, host

    registry = ctx.services.get("registry")
    runtime = AgentRuntime(
        [spec_from_config(a, config) for a in config.agents],
        host_factory,
        RuntimeOptions(
            cache_dir=compiled_cache_dir(config.data_path), output_dir=config.data_path / OUTPUT_DIR
        ),
        resolve=getattr(registry, "resolve", None),
    )

    def on_commit(envelopes: list[Any]) -> None:
        for agent in set(tasks.apply(envelopes)):
            runtime.notify_task(agent)

    ctx.store.add_commit_listener(on_commit)
    ctx.services[RUNTIME] = runtime
    ctx.services["mcp"] = McpServer(runtime, services.sink.publish, services.redactor.value)
    ctx.metrics.agents_total.set(len(runtime.workers))
    runtime.start()
    try:
        yield
    finally:
        await loop.run_in_executor(None, runtime.stop)
        ctx.services.pop(RUNTIME, None)
        await session.close()


class BusSink:
    """The node's EventBus as the hosts' EventSink (callable from any thread)."""

    def __init__(self, bus: Any) -> None:
        self.bus = bus

    def publish(self, agent: str, event: str, data: dict[str, Any]) -> None:
        self.bus.publish_threadsafe(event, data, agent=agent)


def _sink(bus: Any) -> EventSink:
    return BusSink(bus) if bus is not None else NullSink()


def compiled_cache_dir(data_path: Path) -> Path:
    override = os.environ.get(COMPILED_CACHE_ENV)
    return Path(override) if override else data_path / COMPILED_DIR


async def status(request: web.Request) -> web.Response:
    runtime = runtime_of(context_of(request))
    name = request.query.get("agent")
    if name is not None and name not in runtime.workers:
        raise Problem(404, f"no agent {name!r} on this node")
    return json_response([s.to_api() for s in runtime.status(name)])


def _mcp_agent(request: web.Request) -> str:
    ctx = context_of(request)
    name = request.match_info["agent"]
    agent = ctx.config.agent(name)
    if agent is None or not agent.mcp:
        raise Problem(404, f"no MCP server for agent {name!r}")
    return name


async def mcp(request: web.Request) -> web.Response:
    name = _mcp_agent(request)
    server: McpServer = context_of(request).services["mcp"]
    answer = await server.handle(name, await request.read())
    if answer is None:
        return web.Response(status=202)
    return json_response(answer)


async def mcp_get(request: web.Request) -> web.Response:
    _mcp_agent(request)
    raise web.HTTPMethodNotAllowed("GET", ["POST"])
