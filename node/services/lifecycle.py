"""Stop (suspend), start (resume) and remove a deployed agent: each journaled, then carried out
on its instance; a removal also ends what the agent held (grants, tasks, state).
"""

from __future__ import annotations

import asyncio

from node.services.deployment_base import DeploymentBase
from projections import catalogue as c


class Lifecycle(DeploymentBase):
    """Stop, start and remove a deployed agent."""

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
