"""Secrets-broker grants: created from `[agents.grants]`, revoked and restored by operators.

`is_active` reads the projection, which folds an event before its append returns: once a
revoke has been answered, the very next secret lookup of the agent is refused.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from aiohttp import web

from eventstore.store import NewEvent
from node.config import AgentConfig
from node.context import NodeContext
from node.http import Problem
from node.services.journal import ensure_local
from projections import catalogue as c
from projections.grants import Grants
from projections.journals import Journals

log = logging.getLogger(__name__)


class GrantService:
    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx
        self._lock = asyncio.Lock()  # one check-then-append at a time: no double revoke

    @property
    def projection(self) -> Grants:
        return self.ctx.projections.get(Grants)

    def is_active(self, agent: str, domain: str) -> bool:
        """May `agent` read secrets of `domain` right now? (Any thread.)"""
        return self.projection.is_active(agent, domain)

    async def create_configured(self) -> int:
        """Journal `grant.created` for each configured (agent, domain) that has no grant yet.

        Runs at every start, so a domain added to the config later is granted then; a revoked
        grant stays revoked, and removing a domain from the config revokes nothing.
        """
        return await self._create(self.ctx.config.agents)

    async def create_for(self, agent: AgentConfig) -> int:
        """Grant the domains of an agent deployed (or upgraded) on the running node; like the
        config's, a revoked grant stays revoked and a dropped domain revokes nothing."""
        return await self._create([agent])

    async def _create(self, agents: Iterable[AgentConfig]) -> int:
        journals = self.ctx.projections.get(Journals)
        events = []
        for agent in agents:
            home = journals.home_of(agent.name)
            if home not in (None, self.ctx.name):
                log.warning("%s's journal is hosted on %s; not granting here", agent.name, home)
                continue
            for domain in dict.fromkeys(agent.grants.domains):
                if self.projection.get(agent.name, domain) is None:
                    events.append(NewEvent(agent.name, *c.event_of(c.GrantCreated(domain=domain))))
        if events:
            await self.ctx.store.append_many(events)
        return len(events)

    async def revoke(self, agent: str, domain: str) -> dict[str, str]:
        return await self._change(agent, domain, "active", c.GrantRevoked, "revoked")

    async def restore(self, agent: str, domain: str) -> dict[str, str]:
        return await self._change(agent, domain, "revoked", c.GrantRestored, "active")

    async def _change(
        self,
        agent: str,
        domain: str,
        needed: str,
        kind: type[c.GrantRevoked | c.GrantRestored],
        result: str,
    ) -> dict[str, str]:
        async with self._lock:
            grant = self.projection.get(agent, domain)
            if grant is None or grant.status != needed:
                raise Problem(404, f"no {needed} grant for agent {agent!r} and domain {domain!r}")
            ensure_local(self.ctx, agent)
            await self.ctx.store.append(agent, *c.event_of(kind(domain=domain)))
        return {"agent": agent, "domain": domain, "status": result}


GRANTS = web.AppKey("grants", GrantService)
