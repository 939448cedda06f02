"""Placed agents coming and going: the placement manager (node/placement/manager.py) asks
this node to host an agent it became the home of, or to stop one that moved or lost its
lease; the deployment stays journaled either way.
"""

from __future__ import annotations

import asyncio

from node.services.deployment_base import DeploymentBase
from projections import catalogue as c
from projections.placements import Placements
from projections.tasks import Tasks


class PlacedHosting(DeploymentBase):
    """Run here, or stop running here, a placed agent whose home moved."""

    async def host_placed(self, name: str, definition: c.AgentDefinition) -> None:
        """Run here a placed agent this node became the home of (node/placement/resume.py):
        its deployment journaled in this node's journal as the agent's journal says it (the
        same component and definition), its open tasks queued, its instance started."""
        async with self._lock:
            event = self._deployment_moved_in(name, definition)
            if event is not None:
                await self._append(event)
            self.elsewhere.discard(name)
            self._set_hosted()
            await self._follow_grants(name, "not asked for by the definition it moved with")
            runtime = self.runtime
            if self._tasks is not None:
                self._tasks.add_agent(name, self.ctx.projections.get(Tasks).deliverable(name))
            suspended = await self._follow_stop(name)
            if name in runtime.workers:
                await asyncio.to_thread(
                    runtime.replace, self._spec(name), "moved in", self.drain_secs, not suspended
                )
            else:
                await asyncio.to_thread(runtime.add, self._spec(name), not suspended)

    def _deployment_moved_in(self, name: str, definition: c.AgentDefinition) -> c.Payload | None:
        """This node's record of the deployment it takes over, under the revision the agent's
        journal names (`agent.placed`), so the home and every replica call it the same; None
        when the record already says so. A journal of an older version names none (0): the
        node then numbers it itself."""
        deployed = self.projection.get(name)
        placed = self.ctx.projections.get(Placements).get(name)
        named = placed.revision_of(definition) if placed is not None else 0
        if deployed is None:
            return c.AgentDeployed(
                agent=name, revision=named or 1, source="api", definition=definition
            )
        if deployed.current.definition == definition and named in (0, deployed.current.revision):
            return None
        return c.AgentUpgraded(
            agent=name,
            revision=named or deployed.last_revision + 1,
            source=deployed.source,
            definition=definition,
        )

    async def _follow_stop(self, name: str) -> bool:
        """Whether an operator stopped the agent, as its own journal says (wherever that was
        said): this node's `$node` record is brought in line, so every view of it agrees."""
        placed = self.ctx.projections.get(Placements).get(name)
        stopped = placed is not None and placed.stopped
        was = self.projection.get(name)
        if was is not None and was.suspended != stopped:
            operator = placed.stopped_by if placed is not None else None
            event: c.Payload = (
                c.AgentSuspended(agent=name, operator=operator)
                if stopped
                else c.AgentResumed(agent=name, operator=operator)
            )
            await self._append(event)
        return stopped

    async def forget_retired(self, name: str, home: str) -> None:
        """A placed agent deployed here was removed on its home (`agent.retired` in its
        journal): this node's record of the deployment ends too, and nothing of it runs."""
        async with self._lock:
            if self.projection.get(name) is None:
                return
            why = f"removed on its home {home}"
            await self._append(c.AgentRemoved(agent=name, reason=why, operator=None))
            runtime = self._runtime
            if runtime is not None and name in runtime.workers:
                await asyncio.to_thread(runtime.remove, name, why, 0.0)
            self.elsewhere.discard(name)
            self._set_hosted()

    async def unhost_placed(self, name: str, reason: str, drain_secs: float) -> None:
        """Stop running a placed agent here (it moved, or its lease is lost): its instance
        ends (after its run in progress, up to `drain_secs`), its deployment stays."""
        self.elsewhere.add(name)
        runtime = self._runtime
        if runtime is not None and name in runtime.workers:
            await asyncio.to_thread(runtime.remove, name, reason, drain_secs)
        self._set_hosted()
