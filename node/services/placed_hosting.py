"""Placed agents coming and going: the placement manager (node/placement/manager.py) asks
this node to host an agent it became the home of, or to stop one that moved or lost its
lease; the deployment stays journaled either way.
"""

from __future__ import annotations

import asyncio

from node.services.deployment_base import DeploymentBase
from projections import catalogue as c
from projections.tasks import Tasks


class PlacedHosting(DeploymentBase):
    """Run here, or stop running here, a placed agent whose home moved."""

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
                self._tasks.add_agent(name, open_tasks)
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
