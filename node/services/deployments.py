"""Agents as a live resource: deploy, upgrade, roll back, suspend, resume and remove agents on a
running node, each change an event in the node's `$node` journal (projections/deployments.py).

The rule between runtime.toml and the API (docs/design.md, "Agents as a live resource"): an
agent name belongs to one source. runtime.toml's `[[agents]]` are deployed (`source: config`)
at every start, and upgraded when their entry or component bytes changed; one that left the
file is removed. The API deploys, upgrades, rolls back and removes only `source: api` agents;
asking it to change a config-declared one is a 409, and a runtime.toml that declares an agent
the API deployed stops the start with a message saying how to resolve it. Either side may
suspend and resume any agent. Nothing wins silently.

Every change is journaled first, then carried out: after a crash the node starts what the
journal says. An upgrade (or rollback) drains the old instance (its run in progress finishes,
then it ends; past `DRAIN_SECS` it is stopped and a task it was cut in is handed to the next
instance) and starts the new one; a new version that does not load, or whose first tick fails,
is rolled back by the node itself, journaled as `agent.rolled_back` with the reason. One whose
first tick works is then on probation (node/services/rollouts.py): faults in its first runs
roll it back the same way. A run that only waits for an approval is not drained: it ends at
once, and its request is closed (`approval.abandoned`) before the change answers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

import msgspec
import wasmtime
from aiohttp import web

from eventstore.store import NewEvent
from node.config import (
    AGENT_NAME,
    AGENT_NAME_RE,
    REGISTRY_REFERENCE,
    AgentConfig,
    ConfigError,
    agent_problems,
)
from node.context import NodeContext
from node.http import Problem
from node.runtime.runtime import AgentRuntime, InstanceEnd
from node.runtime.spec import AgentSpec, spec_from_config
from node.runtime.tasks import TaskQueue
from node.services.approvals import ApprovalGate
from node.services.definitions import (
    RESERVED_NAMES,
    DeployRequest,
    bounded,
    config_of,
    definition_of,
    placed_event,
    placement_set,
    sha256_file,
)
from node.services.grants import GrantService
from node.services.journal import ensure_local
from node.services.registry import RegistryService, parse_reference
from node.services.rollouts import Change, ProbationSettings, Rollouts
from node.services.tasks import cancellations
from projections import catalogue as c
from projections.deployments import NODE_STREAM, DeployedAgent, DeployedAgents
from projections.journals import Journals
from projections.tasks import Tasks

log = logging.getLogger(__name__)
DRAIN_SECS = 30.0  # how long a swap waits for the run in progress before stopping it
PROBATION_MARGIN_SECS = 30.0  # on top of the tick timeout: loading, queued tasks first
ABANDON_WAIT_SECS = 5.0  # a change waits this long for its agent's requests to be closed


class PlacementHooks(Protocol):
    """What a deployment of a placed agent asks of the placement manager."""

    async def share(self, name: str, definition: c.AgentDefinition, path: Path) -> None:
        """Make the component available to every node of the placement set."""

    async def claim(self, name: str) -> None:
        """Take the lease of a new placed agent (503 Problem when it cannot)."""

    def started_here(self, name: str) -> None:
        """The new placed agent runs here, under the lease `claim` took."""


class DeploymentService:
    def __init__(
        self,
        ctx: NodeContext,
        registry: RegistryService,
        grants: GrantService,
        approvals: ApprovalGate,
    ) -> None:
        self.ctx = ctx
        self.registry = registry
        self.grants = grants
        self.approvals = approvals
        self._loop: asyncio.AbstractEventLoop | None = None
        # runtime.toml's agents as the file declares them (ctx.config.agents becomes the hosted
        # set: these plus the API's)
        self.declared: list[AgentConfig] = list(ctx.config.agents)
        self._lock = asyncio.Lock()  # one lifecycle change at a time
        self._runtime: AgentRuntime | None = None
        self._tasks: TaskQueue | None = None
        self._closed = False
        self.drain_secs = DRAIN_SECS
        # the changes in progress and each agent's latest probation (node/services/rollouts.py)
        self.rollouts = Rollouts(ProbationSettings.of(ctx.config))
        # placed agents deployed here that another node runs now (node/placement/manager.py)
        self.elsewhere: set[str] = set()
        self.placement: PlacementHooks | None = None

    @property
    def projection(self) -> DeployedAgents:
        return self.ctx.projections.get(DeployedAgents)

    @property
    def runtime(self) -> AgentRuntime:
        if self._runtime is None or self._closed:
            raise Problem(503, "the agent runtime is not running")
        return self._runtime

    # ------------------------------------------------------------------ start

    def _config_sha256(self, agent: AgentConfig) -> str:
        """The sha256 of a config agent's component; "" when it cannot be read now (the
        agent then fails to load and says why, as it always did)."""
        try:
            if agent.component.startswith(REGISTRY_REFERENCE):
                package = self.registry.projection.version(*parse_reference(agent.component))
                return package.checksum if package is not None else ""
            return sha256_file(self.ctx.config.path(agent.component))
        except (OSError, ValueError):
            return ""

    async def reconcile(self) -> list[AgentConfig]:
        """Journal what runtime.toml changed since the journal last said, refuse a conflict
        (ConfigError), and return the agents this node hosts: the declared ones, then the
        API's. Runs at every start, before any agent does."""
        events: list[Any] = []
        declared_names = {a.name for a in self.declared}
        for agent in self.declared:
            deployed = self.projection.get(agent.name)
            sha = await asyncio.to_thread(self._config_sha256, agent)
            definition = definition_of(agent, sha)
            if deployed is None:
                revision = 1
                events.append(
                    c.AgentDeployed(
                        agent=agent.name, revision=revision, source="config", definition=definition
                    )
                )
            elif deployed.source == "api":
                raise ConfigError(
                    f"agents: {agent.name!r} is declared in runtime.toml but was deployed "
                    f"through the API (revision {deployed.current.revision}, "
                    f"{deployed.current.definition.component}); an agent belongs to one "
                    f"source: drop it from runtime.toml, or remove the deployed one first "
                    f"(`agent-node agents rm {agent.name}` with the entry left out)"
                )
            elif deployed.current.definition != definition:
                events.append(
                    c.AgentUpgraded(
                        agent=agent.name,
                        revision=deployed.last_revision + 1,
                        source="config",
                        definition=definition,
                    )
                )
        for event in events:
            await self.ctx.store.append(NODE_STREAM, *c.event_of(event))
        for agent in self.declared:
            await self._place_declared(agent)
        for deployed in self.projection.list():
            if deployed.source == "config" and deployed.name not in declared_names:
                await self._remove(deployed.name, "no longer declared in runtime.toml", None)
        return self.hosted()

    async def _place_declared(self, agent: AgentConfig) -> None:
        """A runtime.toml agent whose placement set differs from its journal's: journal it
        (`agent.placed`), where this node writes the agent's journal."""
        deployed = self.projection.get(agent.name)
        if deployed is None or not self._writes(agent.name):
            return
        wanted = placement_set(self.ctx, agent.placement or None, agent.name)
        event = placed_event(self.ctx, agent.name, wanted, deployed.current.definition, True)
        if event is not None:
            await self.ctx.store.append_many([event])

    def _writes(self, name: str) -> bool:
        return self.ctx.projections.get(Journals).home_of(name) in (None, self.ctx.name)

    def hosted(self) -> list[AgentConfig]:
        """The agents to host, as the journal says now (declared first, in file order)."""
        declared = {a.name: a for a in self.declared}
        hosted = [declared[a.name] for a in self.declared if self.projection.get(a.name)]
        hosted += [
            config_of(d.name, d.current.definition)
            for d in self.projection.list()
            if d.source == "api"
        ]
        return [a for a in hosted if a.name not in self.elsewhere]

    def suspended(self) -> set[str]:
        return {d.name for d in self.projection.list() if d.suspended}

    def attach(self, runtime: AgentRuntime | None, tasks: TaskQueue | None) -> None:
        self._runtime, self._tasks = runtime, tasks
        if runtime is not None:
            self._loop = asyncio.get_running_loop()
            runtime.on_instance_ended.append(self.instance_ended)

    async def close(self) -> None:
        """At shutdown: wait (bounded) for a lifecycle change in progress, then refuse more."""
        try:
            await asyncio.wait_for(self._lock.acquire(), DRAIN_SECS + PROBATION_MARGIN_SECS)
        except TimeoutError:
            log.error("a lifecycle change is still running at shutdown")
        else:
            self._lock.release()
        self._closed = True  # later changes answer 503
        for name in list(self.rollouts.latest):
            self.rollouts.end_watch(name, "the node is stopping")
        self.attach(None, None)

    def instance_ended(self, end: InstanceEnd) -> None:
        """An agent's instance ended by a lifecycle change (suspend, upgrade, rollback, remove):
        hand the tasks it was cut in to the next instance, and close what it asked for (no
        later call of that instance can perform it: `approval.abandoned`). Called on the
        thread that ran the change."""
        if self._tasks is not None and end.handed_over:
            released = self._tasks.release(end.agent, end.handed_over)
            log.info("agent %s (%s): %d task(s) handed over", end.agent, end.reason, released)
        loop = self._loop
        if loop is not None and not loop.is_closed():
            reason = f"{end.agent}'s instance ended: {end.reason}"
            closing = asyncio.run_coroutine_threadsafe(self._abandon(end.agent, reason), loop)
            # journaled before the change answers (this thread is not the loop's)
            with contextlib.suppress(concurrent.futures.TimeoutError):
                closing.result(ABANDON_WAIT_SECS)

    async def _abandon(self, agent: str, reason: str) -> None:
        try:
            await self.approvals.abandon_agent(agent, reason)
        except Exception:
            log.exception("could not close the approvals of %s", agent)

    # ------------------------------------------------------------------ progress

    @contextlib.asynccontextmanager
    async def _changing(self, name: str, action: str, step: str) -> AsyncIterator[Change]:
        """A change of `name` in progress, its steps readable by GET /api/v1/agents/{name}
        (`change`); it ends the agent's probation watch, if one runs."""
        change = self.rollouts.begin(name, action, step)
        try:
            yield change
        finally:
            self.rollouts.done(name)

    def _draining(self, change: Change, name: str) -> None:
        """The change's next step ends the running instance: show what it still runs."""
        runtime = self._runtime
        change.worker = runtime.workers.get(name) if runtime is not None else None
        change.step = "ending the old instance"

    def _watch(self, name: str, revision: int, worker: Any) -> str:
        """Put the new instance on probation; the answer's words for it."""
        self.rollouts.watch(name, revision, worker, self._probation_failed)
        settings = self.rollouts.settings
        return (
            f"; on probation for {settings.ticks} good run(s) or {settings.secs:g} s "
            f"(more than {settings.max_faults} fault(s) roll it back)"
        )

    async def _probation_failed(self, name: str, revision: int, why: str) -> int | None:
        """Roll `revision` back by itself, as its probation failed: the revision returned to,
        or None when there is none (or an operator's change came first)."""
        async with self._lock, self._changing(name, "automatic rollback", "journaling") as change:
            deployed = self.projection.get(name)
            if (
                deployed is None
                or deployed.current.revision != revision
                or not self.rollouts.rolling_back(name, revision)
                or not deployed.previous
            ):
                return None
            target = deployed.previous[-1].revision
            target_definition = deployed.previous[-1].definition
            await self._append(
                c.AgentRolledBack(
                    agent=name,
                    from_revision=revision,
                    to_revision=target,
                    reason=f"revision {revision} failed its probation: {why}"[: c.MAX_TEXT],
                    automatic=True,
                )
            )
            await self._placed(name, target_definition, self._current_placement(name))
            self._set_hosted()
            await self._follow_grants(name, f"not asked for by revision {target}")
            self._draining(change, name)
            await asyncio.to_thread(
                self.runtime.replace,
                self._spec(name),
                f"rolled back to revision {target} (probation failed)",
                self.drain_secs,
                not deployed.suspended,
            )
            return target

    # ------------------------------------------------------------------ changes

    def _agent(self, name: str) -> DeployedAgent:
        deployed = self.projection.get(name)
        if deployed is None:
            raise Problem(404, f"no agent {name!r} is deployed on this node")
        self._here(name)
        return deployed

    def _here(self, name: str) -> None:
        """A placed agent is changed on its home only (409 naming it elsewhere)."""
        if name in self.elsewhere or not self._writes(name):
            home = self.ctx.projections.get(Journals).home_of(name)
            raise Problem(
                409,
                f"agent {name!r} runs on node {home!r} now; change it there "
                f"(`agent-node agents move {name} --to {self.ctx.name}` brings it here)",
                home=home,
            )

    def _current_placement(self, name: str) -> tuple[str, ...]:
        return placement_set(self.ctx, None, name)

    async def _placed(self, name: str, definition: c.AgentDefinition, placement: Any) -> None:
        """Journal `agent.placed` after a change of a placed agent (or of its placement)."""
        event = placed_event(self.ctx, name, placement, definition, False)
        if event is not None:
            await self.ctx.store.append_many([event])

    def _only_api(self, deployed: DeployedAgent, what: str) -> None:
        if deployed.source == "config":
            raise Problem(
                409,
                f"agent {deployed.name!r} is declared in runtime.toml; {what} it there "
                "(and restart the node): an agent belongs to one source",
            )

    def _set_hosted(self) -> None:
        self.ctx.config.agents = self.hosted()  # a new list: readers cache by identity
        self.ctx.metrics.agents_total.set(len(self.ctx.config.agents))

    def _spec(self, name: str) -> AgentSpec:
        agent = self.ctx.config.agent(name)
        assert agent is not None, name
        return spec_from_config(agent, self.ctx.config)

    async def _append(self, event: c.Payload) -> None:
        await self.ctx.store.append(NODE_STREAM, *c.event_of(event))

    def _check_request(self, name: str, body: DeployRequest) -> tuple[AgentConfig, Path]:
        if not AGENT_NAME_RE.fullmatch(name):
            raise Problem(400, f"agent name {name[:80]!r} must match {AGENT_NAME}")
        if name in RESERVED_NAMES:
            raise Problem(400, f"{name!r} is reserved (GET /api/v1/agents/{name} is a stream)")
        taken = {self.ctx.name, *(p.name for p in self.ctx.config.peers)}
        if name in taken:
            raise Problem(409, f"{name!r} is the name of a node of this mesh, not an agent")
        raw = msgspec.to_builtins(body)
        raw["name"] = name
        raw["grants"] = {"domains": raw.pop("grant_domains")}
        raw["http"] = {"allow_hosts": raw.pop("allow_hosts")}
        raw.pop("placement")  # checked by placement_set: not an entry's key as given
        if raw["fuel_per_tick"] is None:
            del raw["fuel_per_tick"]
        try:
            agent = msgspec.convert(raw, AgentConfig)
        except msgspec.ValidationError as exc:
            raise Problem(400, f"invalid body: {str(exc).replace('`$.', '`')}") from None
        problems = [p.removeprefix("agent.") for p in agent_problems(agent, "agent")]
        if problems:
            raise Problem(400, "; ".join(problems))
        try:
            parse_reference(agent.component)
        except ValueError as exc:
            raise Problem(
                400,
                f"{exc}; the API deploys from the registry: publish the component "
                "(POST /api/v1/registry/packages) and deploy registry:ID@VERSION",
            ) from None
        try:
            path = self.registry.resolve(agent.component)
        except LookupError as exc:
            raise Problem(404, str(exc)) from None
        return agent, path

    async def _loads(self, path: Path) -> str | None:
        """Why the component does not load (compile/deserialize through the runtime's engine),
        or None when it does."""
        try:
            await asyncio.to_thread(self.runtime.engine.load, path)
        except (OSError, wasmtime.WasmtimeError) as exc:
            return f"the component does not load: {str(exc).strip().splitlines()[0][:500]}"
        return None

    async def deploy(self, name: str, body: DeployRequest, operator: str) -> tuple[int, str]:
        """Deploy a new agent (201) or upgrade a deployed one (200); (status, message)."""
        async with self._lock:
            agent, path = self._check_request(name, body)
            runtime = self.runtime
            ensure_local(self.ctx, name)
            package = self.registry.projection.version(*parse_reference(agent.component))
            assert package is not None  # resolved above
            definition = bounded(definition_of(agent, package.checksum))
            deployed = self.projection.get(name)
            placement = placement_set(self.ctx, body.placement, name)
            if deployed is None:
                async with self._changing(name, "deploy", "checking the component loads"):
                    return 201, await self._deploy_new(name, definition, path, operator, placement)
            self._only_api(deployed, "change")
            self._here(name)
            if deployed.current.definition == definition:
                if await self._replaced(name, definition, placement):
                    return 200, f"agent {name!r} may now run on {', '.join(placement)}"
                return (
                    200,
                    f"agent {name!r} already runs this deployment "
                    f"(revision {deployed.current.revision}); nothing changed",
                )
            async with self._changing(name, "upgrade", "checking the component loads") as change:
                return 200, await self._upgrade(
                    deployed, definition, path, operator, runtime, change, placement
                )

    async def _replaced(
        self, name: str, definition: c.AgentDefinition, placement: tuple[str, ...]
    ) -> bool:
        """Only the placement set changed: journal it; whether it did change."""
        event = placed_event(self.ctx, name, placement, definition, True)
        if event is None:
            return False
        if len(placement) > 1 and self.placement is not None:
            path = self.registry.resolve(definition.component)
            await self.placement.share(name, definition, path)
        await self.ctx.store.append_many([event])
        return True

    async def _deploy_new(
        self,
        name: str,
        definition: c.AgentDefinition,
        path: Path,
        operator: str,
        placement: tuple[str, ...] = (),
    ) -> str:
        why = await self._loads(path)
        if why is not None:
            raise Problem(422, f"agent {name!r} not deployed: {why}")
        deployed = NewEvent(
            NODE_STREAM,
            *c.event_of(
                c.AgentDeployed(
                    agent=name, revision=1, source="api", definition=definition, operator=operator
                )
            ),
        )
        placed = placed_event(self.ctx, name, placement, definition, False)
        if placed is not None:  # its lease first: a placed agent runs only while held
            if self.placement is None:
                raise Problem(503, "placement needs the NATS mesh, which is not running")
            await self.placement.share(name, definition, path)
            await self.placement.claim(name)
        await self.ctx.store.append_many([deployed] + ([placed] if placed is not None else []))
        if placed is not None and self.placement is not None:
            self.placement.started_here(name)
        self._set_hosted()
        await self._follow_grants(name, "not asked for by revision 1")
        if self._tasks is not None:
            open_tasks = self.ctx.projections.get(Tasks).open_tasks(name)
            self._tasks.add_agent(name, ((t.id, t.from_, t.input) for t in open_tasks))
        worker = await asyncio.to_thread(self.runtime.add, self._spec(name))
        why = await self._probation(worker.probation, definition)
        if why is not None:
            return f"deployed as revision 1, but its first run failed: {why}"
        return "deployed as revision 1"

    async def _probation(self, probation: Any, definition: c.AgentDefinition) -> str | None:
        """Why the new instance failed before its first good tick, or None once it had one."""
        timeout = definition.limits.tick_timeout_ms / 1000 + PROBATION_MARGIN_SECS
        try:
            return await asyncio.wait_for(asyncio.wrap_future(probation), timeout)
        except TimeoutError:
            return f"no successful first tick within {timeout:.0f} s"

    async def _upgrade(
        self,
        deployed: DeployedAgent,
        definition: c.AgentDefinition,
        path: Path,
        operator: str,
        runtime: AgentRuntime,
        change: Change,
        placement: tuple[str, ...] = (),
    ) -> str:
        name = deployed.name
        revision = deployed.last_revision + 1
        previous = deployed.current.revision
        upgraded = c.AgentUpgraded(
            agent=name, revision=revision, source="api", definition=definition, operator=operator
        )
        why = await self._loads(path)  # before the swap: the old instance runs on meanwhile
        if why is not None:  # journaled as tried and undone, in one write
            rolled_back = self._rolled_back(name, revision, previous, why)
            await self.ctx.store.append_many(
                [NewEvent(NODE_STREAM, *c.event_of(e)) for e in (upgraded, rolled_back)]
            )
            raise self._failed(name, revision, previous, why)
        if len(placement) > 1 and self.placement is not None:  # the new bytes, where needed
            await self.placement.share(name, definition, path)
        await self._append(upgraded)
        await self._placed(name, definition, placement or self._current_placement(name))
        self._set_hosted()
        await self._follow_grants(name, f"not asked for by revision {revision}")
        reason = f"upgraded to revision {revision}"
        self._draining(change, name)
        worker = await asyncio.to_thread(
            runtime.replace, self._spec(name), reason, self.drain_secs, not deployed.suspended
        )
        change.worker, change.step = None, "waiting for the new instance's first good run"
        if deployed.suspended:
            return f"upgraded to revision {revision} (stopped: it runs once started)"
        why = await self._probation(worker.probation, definition)
        if why is None:
            return f"upgraded to revision {revision}" + self._watch(name, revision, worker)
        await self._append(self._rolled_back(name, revision, previous, why))
        await self._placed(name, deployed.current.definition, self._current_placement(name))
        self._set_hosted()
        await self._follow_grants(name, f"not asked for by revision {previous}")
        self._draining(change, name)
        await asyncio.to_thread(
            runtime.replace,
            self._spec(name),
            f"rolled back to revision {previous}",
            self.drain_secs,
            not deployed.suspended,
        )
        raise self._failed(name, revision, previous, why)

    @staticmethod
    def _rolled_back(name: str, revision: int, previous: int, why: str) -> c.AgentRolledBack:
        return c.AgentRolledBack(
            agent=name,
            from_revision=revision,
            to_revision=previous,
            reason=f"revision {revision} failed: {why}"[: c.MAX_TEXT],
            automatic=True,
        )

    @staticmethod
    def _failed(name: str, revision: int, previous: int, why: str) -> Problem:
        return Problem(
            422,
            f"upgrade of {name!r} to revision {revision} failed and was rolled back to "
            f"revision {previous}: {why}",
            rolled_back_to=previous,
        )

    async def rollback(self, name: str, reason: str, operator: str) -> str:
        async with self._lock:
            deployed = self._agent(name)
            self._only_api(deployed, "roll back")
            if not deployed.previous:
                raise Problem(409, f"agent {name!r} has no earlier deployment to roll back to")
            async with self._changing(name, "rollback", "journaling") as change:
                return await self._roll_back_to(deployed, reason, operator, change)

    async def _roll_back_to(
        self, deployed: DeployedAgent, reason: str, operator: str, change: Change
    ) -> str:
        name = deployed.name
        target = deployed.previous[-1]
        await self._append(
            c.AgentRolledBack(
                agent=name,
                from_revision=deployed.current.revision,
                to_revision=target.revision,
                reason=reason[: c.MAX_TEXT],
                operator=operator,
            )
        )
        await self._placed(name, target.definition, self._current_placement(name))
        self._set_hosted()
        await self._follow_grants(name, f"not asked for by revision {target.revision}")
        self._draining(change, name)
        worker = await asyncio.to_thread(
            self.runtime.replace,
            self._spec(name),
            f"rolled back to revision {target.revision}",
            self.drain_secs,
            not deployed.suspended,
        )
        done = f"rolled back to revision {target.revision}"
        if deployed.suspended:
            return done + " (stopped: it runs once started)"
        return done + self._watch(name, target.revision, worker)

    # ------------------------------------------------------------------ placed agents

    async def host_placed(self, name: str, definition: c.AgentDefinition) -> None:
        """Run here a placed agent this node became the home of (node/placement/resume.py):
        its deployment journaled in this node's journal as the agent's journal says it (the
        same component and definition), its open tasks queued, its instance started."""
        async with self._lock:
            deployed = self.projection.get(name)
            event: c.Payload | None = None
            if deployed is None:
                event = c.AgentDeployed(agent=name, revision=1, source="api", definition=definition)
            elif deployed.current.definition != definition:
                revision = deployed.last_revision + 1
                event = c.AgentUpgraded(
                    agent=name, revision=revision, source=deployed.source, definition=definition
                )
            if event is not None:
                await self._append(event)
            self.elsewhere.discard(name)
            self._set_hosted()
            await self._follow_grants(name, "not asked for by the definition it moved with")
            runtime = self.runtime
            if self._tasks is not None:
                open_tasks = self.ctx.projections.get(Tasks).open_tasks(name)
                self._tasks.add_agent(name, ((t.id, t.from_, t.input) for t in open_tasks))
            suspended = deployed is not None and deployed.suspended
            if name in runtime.workers:
                await asyncio.to_thread(
                    runtime.replace, self._spec(name), "moved in", self.drain_secs, not suspended
                )
            else:
                await asyncio.to_thread(runtime.add, self._spec(name), not suspended)

    async def unhost_placed(self, name: str, reason: str, drain_secs: float) -> None:
        """Stop running a placed agent here (it moved, or its lease is lost): its instance
        ends (after its run in progress, up to `drain_secs`), its deployment stays."""
        self.elsewhere.add(name)
        runtime = self._runtime
        if runtime is not None and name in runtime.workers:
            await asyncio.to_thread(runtime.remove, name, reason, drain_secs)
        self._set_hosted()

    async def suspend(self, name: str, operator: str) -> str:
        async with self._lock:
            deployed = self._agent(name)
            if deployed.suspended:
                return f"agent {name!r} was already stopped"
            async with self._changing(name, "stop", "journaling") as change:
                await self._append(c.AgentSuspended(agent=name, operator=operator))
                self._draining(change, name)
                await asyncio.to_thread(self.runtime.suspend, name, "suspended", self.drain_secs)
                return "stopped; its tasks stay queued until it is started"

    async def resume(self, name: str, operator: str) -> str:
        async with self._lock:
            deployed = self._agent(name)
            if not deployed.suspended:
                return f"agent {name!r} was already running"
            async with self._changing(name, "start", "journaling"):
                await self._append(c.AgentResumed(agent=name, operator=operator))
                await asyncio.to_thread(
                    self.runtime.replace, self._spec(name), "resumed", self.drain_secs, True
                )
                return "started"

    async def remove(self, name: str, operator: str) -> str:
        async with self._lock:
            deployed = self._agent(name)
            self._only_api(deployed, "remove")
            async with self._changing(name, "remove", "journaling") as change:
                await self._remove(name, "", operator)
                self._draining(change, name)
                await asyncio.to_thread(self.runtime.remove, name, "removed", self.drain_secs)
                self._set_hosted()
                self.rollouts.forget(name)
                return (
                    "removed; its journal is kept for audit, and a new deployment of this name "
                    "starts with no state, tasks or grants"
                )

    async def _remove(self, name: str, reason: str, operator: str | None) -> None:
        """Journal the removal and, in the same write, the end of everything the agent held:
        its grants revoked, its open tasks canceled, its state retired (`agent.retired`), so
        nothing of it reaches a later deployment of the same name (docs/operations.md)."""
        why = f"agent removed{': ' + reason if reason else ''}"[: c.MAX_TEXT]
        events = [
            NewEvent(
                NODE_STREAM,
                *c.event_of(c.AgentRemoved(agent=name, reason=reason, operator=operator)),
            )
        ]
        if self.ctx.projections.get(Journals).home_of(name) in (None, self.ctx.name):
            events += self.grants.revocations_of(name, why)
            events += cancellations(self.ctx.projections.get(Tasks), name, operator)
            events.append(
                NewEvent(name, *c.event_of(c.AgentRetired(reason=why, operator=operator)))
            )
        await self.ctx.store.append_many(events)

    async def _follow_grants(self, name: str, why: str) -> None:
        agent = self.ctx.config.agent(name)
        assert agent is not None
        await self.grants.follow([agent], why)


DEPLOYMENTS = web.AppKey("deployments", DeploymentService)
