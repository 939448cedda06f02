"""Handing an agent's ownership to another node: the owner's last decision about it.

The owner (node/sync/rules/owner.py) is the only node whose `agent.placed`, `agent.halted`,
`agent.unhalted`, `agent.retired` and `agent.owner_handed` any node accepts. It hands that to
another node of the agent's placement set with `agent.owner_handed {to}`, written while it is
the agent's home (only the home writes the journal) and answered once the mesh's stream holds
it; from the next envelope on only `to` decides. Nothing else changes an owner: an owner gone
for good leaves the agent running as last decided (docs/mesh.md, "The owner decides").
"""

from __future__ import annotations

from eventstore.store import NewEvent
from node.services.deployment_base import DeploymentBase
from node.web.http import Problem
from projections import catalogue as c
from projections.placements import Placements


class OwnerHanding(DeploymentBase):
    """`POST /api/v1/agents/{name}/owner` on the owner, while it is the home."""

    async def hand_owner(self, name: str, to: str, operator: str) -> str:
        async with self._lock:
            self._agent(name)  # deployed here, homed here, owned by this node (409 otherwise)
            placed = self.ctx.projections.get(Placements).get(name)
            if placed is None or len(placed.placement) <= 1 or self.placement is None:
                raise Problem(409, f"agent {name!r} is not placed: its owner is its only node")
            if to == self.ctx.name:
                return f"agent {name!r} is owned by this node already"
            if to not in placed.placement:
                raise Problem(
                    422,
                    f"node {to!r} is not in the placement set of {name!r} "
                    f"({', '.join(placed.placement)}): place it there first",
                )
            handed = c.AgentOwnerHanded(to=to, operator=operator)
            await self.ctx.store.append_many([NewEvent(name, *c.event_of(handed))])
            await self.placement.confirm(name)  # held by the stream before the answer
            return (
                f"agent {name!r} is owned by {to!r} now: its definition, placement, stop, "
                f"start and removal are that node's decisions"
            )
