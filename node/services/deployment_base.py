"""The state and the shared steps of the deployment service (node/services/deployments.py):
the journaled deployments, the change in progress, and what every change does once
journaled (place, host, follow grants), so each kind of change lives in its own module.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Protocol

import wasmtime

from eventstore.store import NewEvent
from node.config.model import AgentConfig
from node.context import NodeContext
from node.placement.standby import Standby
from node.runtime.runtime import AgentRuntime
from node.runtime.spec import AgentSpec, spec_from_config
from node.runtime.tasks import TaskQueue
from node.services.approvals import ApprovalGate
from node.services.definitions import config_of, placed_event, placement_set
from node.services.grants import GrantService
from node.services.registry import RegistryService
from node.services.rollouts import Change, Rollouts
from node.services.tasks import cancellations
from node.web.http import Problem
from projections import catalogue as c
from projections.deployments import NODE_STREAM, DeployedAgent, DeployedAgents
from projections.journals import Journals
from projections.tasks import Tasks

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

    async def confirm(self, name: str) -> None:
        """A write to the agent's journal counts once the mesh's stream holds it (503 else)."""

    async def retired(self, name: str) -> None:
        """The placed agent was removed here, its home: its lease is given up for good."""

    async def prepare_standby(
        self,
        name: str,
        definition: c.AgentDefinition,
        wait: bool,
        progress: Callable[[Standby], None],
    ) -> Standby:
        """Before an upgrade switches: the set's other nodes make it ready (and, with
        `wait`, until one is)."""

    async def standby(self, name: str, wait: bool, progress: Callable[[Standby], None]) -> Standby:
        """After a first deploy: the set's other nodes ready to take it over (waited for)."""


def standby_step(action: str) -> Callable[[Standby], str]:
    """The step a change waiting for a standby shows (`agents deploy|upgrade` say it)."""

    def step(standby: Standby) -> str:
        ready, of = len(standby.ready), len(standby.of)
        return f"a standby: {ready} of {of} other nodes of its set ready on the {action}"

    return step


class DeploymentBase:
    """What every kind of change shares: the service's state, the journal's view of the
    deployed agents, and the steps every change takes (journal, place, host, follow grants)."""

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
        self.rollouts = Rollouts(ctx.config.node)
        # placed agents deployed here that another node runs now (node/placement/manager.py)
        self.elsewhere: set[str] = set()
        self.placement: PlacementHooks | None = None
        # the standby the last deploy or upgrade of each agent found (its answer says it)
        self.standbys: dict[str, Standby] = {}

    @property
    def projection(self) -> DeployedAgents:
        return self.ctx.projections.get(DeployedAgents)

    @property
    def runtime(self) -> AgentRuntime:
        if self._runtime is None or self._closed:
            raise Problem(503, "the agent runtime is not running")
        return self._runtime

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

    def _agent(self, name: str) -> DeployedAgent:
        deployed = self.projection.get(name)
        if deployed is None:
            raise Problem(404, f"no agent {name!r} is deployed on this node")
        self._here(name)
        return deployed

    def _owns(self, name: str) -> bool:
        """Whether this node is the agent's owner (node/sync/rules/owner.py): the only node
        whose changes of its definition, set, stop, start and removal any node accepts."""
        return self.ctx.projections.get(Journals).owner_of(name) in (None, self.ctx.name)

    def _here(self, name: str) -> None:
        """A placed agent is changed on its home only (409 naming it elsewhere), and only when
        that home is its owner (409 naming the owner: the change is the owner's decision)."""
        if name in self.elsewhere or not self._writes(name):
            home = self.ctx.projections.get(Journals).home_of(name)
            raise Problem(
                409,
                f"agent {name!r} runs on node {home!r} now; change it there "
                f"(`agent-node agents move {name} --to {self.ctx.name}` brings it here)",
                home=home,
            )
        if not self._owns(name):
            owner = self.ctx.projections.get(Journals).owner_of(name)
            raise Problem(
                409,
                f"agent {name!r} is owned by node {owner!r}: its definition, placement, stop, "
                f"start and removal are that node's decisions, which every node refuses from "
                f"any other; move it there (`agent-node agents move {name} --to {owner}` on "
                f"this node) and change it on {owner!r}",
                owner=owner,
            )

    def _current_placement(self, name: str) -> tuple[str, ...]:
        return placement_set(self.ctx, None, name)

    async def _placed(
        self,
        name: str,
        definition: c.AgentDefinition,
        placement: Any,
        change: c.PlacedChange,
        operator: str | None,
    ) -> None:
        """Journal `agent.placed` after a change of a placed agent (or of its placement)."""
        event = placed_event(self.ctx, name, placement, definition, False, change, operator)
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

    async def _loads(self, path: Path) -> str | None:
        """Why the component does not load (compile/deserialize through the runtime's engine),
        or None when it does."""
        try:
            await asyncio.to_thread(self.runtime.engine.load, path)
        except (OSError, wasmtime.WasmtimeError) as exc:
            return f"the component does not load: {str(exc).strip().splitlines()[0][:500]}"
        return None

    async def _probation(self, probation: Any, definition: c.AgentDefinition) -> str | None:
        """Why the new instance failed before its first good tick, or None once it had one."""
        timeout = definition.limits.tick_timeout_ms / 1000 + PROBATION_MARGIN_SECS
        try:
            return await asyncio.wait_for(asyncio.wrap_future(probation), timeout)
        except TimeoutError:
            return f"no successful first tick within {timeout:.0f} s"

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
