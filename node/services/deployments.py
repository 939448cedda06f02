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

from aiohttp import web

from node.runtime.runtime import AgentRuntime, InstanceEnd
from node.runtime.tasks import TaskQueue
from node.services.declared_agents import DeclaredAgents
from node.services.deployment_base import ABANDON_WAIT_SECS, DRAIN_SECS, PROBATION_MARGIN_SECS
from node.services.lifecycle import Lifecycle
from node.services.owner_handing import OwnerHanding
from node.services.placed_hosting import PlacedHosting
from node.services.upgrades import Upgrades

log = logging.getLogger(__name__)


class DeploymentService(DeclaredAgents, Upgrades, Lifecycle, PlacedHosting, OwnerHanding):
    """The deployment service: each kind of change from its own module, plus its place in the
    node's life (attached to the runtime, closed at shutdown, told of ended instances)."""

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


DEPLOYMENTS = web.AppKey("deployments", DeploymentService)
