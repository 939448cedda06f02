"""Stop (suspend), start (resume) and remove a deployed agent: each journaled, then carried out
on its instance; a removal also ends what the agent held (grants, tasks, state).

For a placed agent each decision is also a fact of the agent's own journal (`agent.halted`,
`agent.unhalted`, `agent.retired`), in the same write as this node's `$node` record, and
answered only once the mesh's stream holds it: whichever node becomes its home next reads it
there, so a stop holds across any number of moves and failovers and a removed agent never runs
again anywhere (node/placement/manager.py).
"""

from __future__ import annotations

import asyncio

from eventstore.store import NewEvent
from node.services.deployment_base import DeploymentBase
from projections import catalogue as c
from projections.deployments import NODE_STREAM
from projections.placements import Placements


class Lifecycle(DeploymentBase):
    """Stop, start and remove a deployed agent."""

    async def suspend(self, name: str, operator: str) -> str:
        async with self._lock:
            deployed = self._agent(name)
            if deployed.suspended:
                return f"agent {name!r} was already stopped"
            async with self._changing(name, "stop", "journaling") as change:
                await self._decide(
                    name,
                    c.AgentSuspended(agent=name, operator=operator),
                    c.AgentHalted(operator=operator),
                )
                self._draining(change, name)
                await asyncio.to_thread(self.runtime.suspend, name, "suspended", self.drain_secs)
                return "stopped; its tasks stay queued until it is started"

    async def resume(self, name: str, operator: str) -> str:
        async with self._lock:
            deployed = self._agent(name)
            if not deployed.suspended:
                return f"agent {name!r} was already running"
            async with self._changing(name, "start", "journaling"):
                await self._decide(
                    name,
                    c.AgentResumed(agent=name, operator=operator),
                    c.AgentUnhalted(operator=operator),
                )
                await asyncio.to_thread(
                    self.runtime.replace, self._spec(name), "resumed", self.drain_secs, True
                )
                return "started"

    async def remove(self, name: str, operator: str) -> str:
        async with self._lock:
            deployed = self._agent(name)
            self._only_api(deployed, "remove")
            async with self._changing(name, "remove", "journaling") as change:
                placed = self.placement is not None and self._is_placed(name)
                # the instance first: a run still under way would journal its last events
                # after `agent.retired`, which ends the journal. Should the write below fail,
                # the agent stays stopped here (and deployed: a retry removes it)
                self._draining(change, name)
                if name in self.runtime.workers:
                    await asyncio.to_thread(self.runtime.remove, name, "removed", self.drain_secs)
                change.step = "journaling"
                await self._remove(name, "", operator)
                if placed and self.placement is not None:
                    await self.placement.confirm(name)  # `agent.retired` held by the stream
                    await self.placement.retired(name)
                self._set_hosted()
                self.rollouts.forget(name)
                return (
                    "removed; its journal is kept for audit, and a new deployment of this name "
                    "starts with no state, tasks or grants"
                )

    def _is_placed(self, name: str) -> bool:
        placed = self.ctx.projections.get(Placements).agents.get(name)
        return placed is not None and len(placed.placement) > 1

    async def _decide(self, name: str, here: c.Payload, everywhere: c.Payload) -> None:
        """This node's record of an operator's decision, and for a placed agent the fact in its
        own journal (one write), acknowledged by the mesh's stream before the answer."""
        events = [NewEvent(NODE_STREAM, *c.event_of(here))]
        placed = self.placement is not None and self._is_placed(name)
        if placed:
            events.append(NewEvent(name, *c.event_of(everywhere)))
        await self.ctx.store.append_many(events)
        if placed and self.placement is not None:
            await self.placement.confirm(name)
