"""The runtime as an area of the node: its lifecycle, GET /api/v1/status and the MCP endpoint
(node/api/mcp.py).

The agents call the approval gate, the grants, the task service, the event bus and the
registry, so this area comes after theirs (it takes them in `setup`), and its lifecycle,
registered after theirs, stops every agent before any of them closes. The lifecycle starts one
worker per [[agents]] entry once the journal is open, feeds task events to the delivery queue,
and stops every agent (blocking, so in a thread) before the journal closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from node.api import mcp
from node.config.model import AgentConfig
from node.context import CONTEXT, NodeContext
from node.inference.budgets import InferenceBudgets
from node.inference.notices import BudgetNotices
from node.inference.service import InferenceService
from node.ops import tracing
from node.placement.key import PLACEMENT
from node.runtime.agents import AGENTS, Agents
from node.runtime.capabilities import Capabilities
from node.runtime.compiled_cache import compiled_cache_dir
from node.runtime.host import HostServices, JournalHost
from node.runtime.mcp import McpServer
from node.runtime.runtime import AgentRuntime
from node.runtime.spec import AgentSpec, RuntimeOptions, compile_limits, spec_from_config
from node.runtime.startup import StartupProgress
from node.runtime.status import StatusView
from node.runtime.tasks import TaskQueue
from node.services.approvals import APPROVALS, ApprovalGate
from node.services.definitions import refuse_foreign
from node.services.deployments import DEPLOYMENTS, DeploymentService
from node.services.grants import GRANTS, GrantService
from node.services.registry import REGISTRY, RegistryService
from node.services.tasks import TASKS, TaskService
from node.streams.bus import BUS, EventBus
from node.sync.service import SYNC
from node.web.http import Problem, json_response
from node.web.routes import Doc, Query, add_route
from projections.call_records import OpenRuns
from projections.entries import Findings
from projections.inference_ledger import InferenceLedger
from projections.tasks import Tasks

log = logging.getLogger("agent-node.placement")
OUTPUT_DIR = "agent-output"  # under data_dir: agents' stdout/stderr files while they run


def setup(app: web.Application) -> None:
    agents = app[AGENTS] = Agents()
    deps = RuntimeDeps(
        approvals=app[APPROVALS],
        grants=app[GRANTS],
        tasks=app[TASKS],
        bus=app[BUS],
        registry=app[REGISTRY],
        deployments=DeploymentService(app[CONTEXT], app[REGISTRY], app[GRANTS], app[APPROVALS]),
    )
    app[DEPLOYMENTS] = deps.deployments
    if app[CONTEXT].config.mesh.transport == "nats":  # placed agents (node/placement/)
        from node.placement.manager import PlacementManager  # nats-py: an optional extra

        app[PLACEMENT] = PlacementManager(
            app[CONTEXT], deps.deployments, deps.approvals, deps.registry, app[SYNC]
        )
        deps.tasks.confirm = app[PLACEMENT].confirm
    app.cleanup_ctx.append(lambda app: runtime_lifecycle(app, agents, deps))
    add_route(
        app,
        "GET",
        "/api/v1/status",
        status,
        "read",
        Doc(
            "Status of the hosted agents",
            "agents",
            list[StatusView],
            errors=(404, 503),
            query=(Query("agent", str, "only this agent"),),
        ),
    )
    mcp.setup(app)


@dataclass(frozen=True)
class RuntimeDeps:
    """The other areas' services the agents call."""

    approvals: ApprovalGate
    grants: GrantService
    tasks: TaskService
    bus: EventBus
    registry: RegistryService
    deployments: DeploymentService


async def runtime_lifecycle(
    app: web.Application, agents: Agents, deps: RuntimeDeps
) -> AsyncIterator[None]:
    ctx = app[CONTEXT]
    config = ctx.config
    deployments = deps.deployments
    keep_as_replicas(ctx, deployments, deployments.declared)
    placement = app.get(PLACEMENT)
    if placement is not None:  # a placed agent runs once its lease is held (manager.py)
        placement.hold_back()
    # the agents to host: what the journal's lifecycle events say, runtime.toml's changes
    # journaled first (a conflict between the two stops the start here)
    hosted = await deployments.reconcile()
    if placement is not None:
        placement.hold_back()
    keep_as_replicas(ctx, deployments, deployments.hosted())
    hosted = deployments.hosted()
    config.agents = hosted
    ctx.metrics.agents_total.set(len(hosted))
    loop = asyncio.get_running_loop()
    tracing.start(config.tracing)  # OpenTelemetry spans, when [tracing] enabled
    session = aiohttp.ClientSession()
    names = [a.name for a in config.agents]
    tasks = TaskQueue(names)
    read_model = ctx.projections.get(Tasks)
    for name in names:  # unfinished tasks from before a restart are delivered again
        tasks.seed(name, read_model.deliverable(name))
    services = HostServices(
        config=config,
        store=ctx.store,
        metrics=ctx.metrics,
        loop=loop,
        capabilities=Capabilities(session, config.actions),
        inference=InferenceService(
            session,
            config.inference,
            ctx.metrics,
            InferenceBudgets(
                config.inference.budgets,
                ctx.projections.get(InferenceLedger),
                config.agent_groups,
                names,
            ),
            BudgetNotices(ctx.store, ctx.projections.get(Findings), ctx.name),
        ),
        tasks=tasks,
        approvals=deps.approvals,
        grants=deps.grants,
        task_service=deps.tasks,
        sink=BusSink(deps.bus),
        open_runs=ctx.projections.get(OpenRuns),
    )

    def host_factory(spec: AgentSpec, stopping: Any) -> tuple[JournalHost, JournalHost]:
        agent = config.agent(spec.name)
        assert agent is not None
        host = JournalHost(agent, services, stopping)
        host.wake = lambda: runtime.notify_task(spec.name)  # a parked run's verdict came
        return host, host

    runtime = AgentRuntime(
        [spec_from_config(a, config) for a in config.agents],
        host_factory,
        RuntimeOptions(
            cache_dir=compiled_cache_dir(config.data_path),
            output_dir=config.data_path / OUTPUT_DIR,
            compile_limits=compile_limits(config),
        ),
        resolve=deps.registry.resolve,
    )
    deps.registry.engine = runtime.engine  # a publish compiles once, for the deploys after it

    def on_commit(envelopes: list[Any]) -> None:
        changes = [change for e in envelopes for change in read_model.task_changes(e)]
        if changes:
            for agent in set(tasks.apply(changes, read_model.deliverable_task)):
                runtime.notify_task(agent)

    ctx.store.add_commit_listener(on_commit)
    page_bytes = ctx.config.node.page_max_kb * 1024
    mcp = McpServer(runtime, services.sink.publish, services.redactor.value, page_bytes)
    agents.attach(runtime, mcp)
    deployments.attach(runtime, tasks)
    suspended = deployments.suspended()
    runtime.start(suspended=suspended)
    # a line per agent as it comes up, and the ones still starting after the ready line
    agents.startup = StartupProgress(
        {name: w for name, w in runtime.workers.items() if name not in suspended}
    )
    agents.startup.watch()
    placing = None
    nats_mesh = app[SYNC].nats
    if placement is not None and nats_mesh is not None:
        from node.placement.link import open_link

        placing = asyncio.create_task(placement.supervise(nats_mesh, open_link), name="placement")
    try:
        yield
    finally:
        if placing is not None and placement is not None:  # SIGTERM: hand placed agents over
            with contextlib.suppress(Exception):
                for moved in await placement.drain():
                    log.info("shutting down: %s", drained_text(moved))
        if placing is not None:
            placing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await placing
        await deployments.close()  # a lifecycle change in progress ends first
        deps.registry.engine = None  # publishes from here on check alone
        await loop.run_in_executor(None, runtime.stop)
        agents.attach(None, None)
        await session.close()
        await loop.run_in_executor(None, tracing.stop)


def keep_as_replicas(
    ctx: NodeContext, deployments: DeploymentService, agents: list[AgentConfig]
) -> None:
    """Agents of this node whose placed journal another node writes, with a set that no longer
    names this node: kept as replicas, never run here (refuse_foreign refuses the others)."""
    for name in sorted(refuse_foreign(ctx, agents)):
        if name not in deployments.elsewhere:
            log.warning(
                "agent %s was deployed here, but its placement set no longer names this node: "
                "kept as a replica, never run here; nothing to do on this node (an [[agents]] "
                "entry of it may be dropped). Not `agent-node agents rm` on its home: that "
                "removes it from every node of its set",
                name,
            )
        deployments.elsewhere.add(name)
        ctx.store.disown(name)


def drained_text(moved: dict[str, Any]) -> str:
    if moved["done"] == "moved":
        return f"agent {moved['agent']} handed over to {moved['to']} (epoch {moved['epoch']})"
    why = f": {moved['why']}" if moved.get("why") else ""
    return f"agent {moved['agent']}: its lease given up for another node to take{why}"


class BusSink:
    """The node's EventBus as the hosts' EventSink (callable from any thread)."""

    def __init__(self, bus: EventBus) -> None:
        self.bus = bus

    def publish(self, agent: str, event: str, data: dict[str, Any]) -> None:
        self.bus.publish_threadsafe(event, data, agent=agent)


async def status(request: web.Request) -> web.Response:
    runtime = request.app[AGENTS].runtime
    name = request.query.get("agent")
    if name is not None and name not in runtime.workers:
        raise Problem(404, f"no agent {name!r} on this node")
    return json_response([s.to_api() for s in runtime.status(name)])
