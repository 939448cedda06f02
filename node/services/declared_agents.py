"""runtime.toml's `[[agents]]` against the journal: at every start, what the file changed is
journaled (deployed, upgraded, placed, removed) and a conflict with an API-deployed agent
stops the start (docs/design.md, "Agents as a live resource").
"""

from __future__ import annotations

import asyncio
from typing import Any

from node.config.model import REGISTRY_REFERENCE, AgentConfig, ConfigError
from node.services.definitions import definition_of, placed_event, placement_set, sha256_file
from node.services.deployment_base import DeploymentBase
from node.services.registry import parse_reference
from projections import catalogue as c
from projections.deployments import NODE_STREAM


class DeclaredAgents(DeploymentBase):
    """runtime.toml's agents, reconciled with the journal at every start."""

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
        if deployed is None or not self._writes(agent.name) or not self._owns(agent.name):
            return
        wanted = placement_set(self.ctx, agent.placement or None, agent.name)
        event = placed_event(self.ctx, agent.name, wanted, deployed.current.definition, True)
        if event is not None:
            await self.ctx.store.append_many([event])
