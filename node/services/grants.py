"""Secrets-broker grants: they follow each agent's deployment (`[agents.grants]` or the API's
`grant_domains`), and operators revoke and restore them.

`is_active` reads the projection, which folds an event before its append returns: once a
revoke has been answered, the very next secret lookup of the agent is refused.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from aiohttp import web

from eventstore.store import NewEvent
from node.config.model import AgentConfig
from node.context import NodeContext
from node.services.journal import ensure_local
from node.web.http import Problem
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

    async def follow_configured(self) -> int:
        """Make the grants of runtime.toml's agents what their entries ask for (at every start,
        so a domain added or dropped while the node was down is granted or revoked then)."""
        return await self.follow(self.ctx.config.agents, "no longer in its runtime.toml entry")

    async def follow(self, agents: Iterable[AgentConfig], why: str) -> int:
        """Grants follow the deployment: journal `grant.created` for each domain an agent asks
        for and never had, restore one the node itself revoked when an earlier deployment
        dropped it, and revoke (with `why`) each active grant its definition no longer asks
        for. A grant an operator revoked stays revoked. Returns the number of events."""
        journals = self.ctx.projections.get(Journals)
        async with self._lock:  # checked and appended with no operator's revoke in between
            events = []
            for agent in agents:
                home = journals.home_of(agent.name)
                if home not in (None, self.ctx.name):
                    log.warning("%s's journal is hosted on %s; not granting here", agent.name, home)
                    continue
                events += [NewEvent(agent.name, *c.event_of(e)) for e in self._changes(agent, why)]
            if events:
                await self.ctx.store.append_many(events)
        return len(events)

    def _changes(self, agent: AgentConfig, why: str) -> list[c.Payload]:
        asked = dict.fromkeys(agent.grants.domains)
        changes: list[c.Payload] = []
        for domain in asked:
            grant = self.projection.get(agent.name, domain)
            if grant is None:
                changes.append(c.GrantCreated(domain=domain))
            elif grant.dropped_by_deployment:
                changes.append(c.GrantRestored(domain=domain))
        for grant in self.projection.of_agent(agent.name):
            if grant.status == "active" and grant.domain not in asked:
                changes.append(c.GrantRevoked(domain=grant.domain, reason=why[: c.MAX_TEXT]))
        return changes

    def revocations_of(self, agent: str, why: str) -> list[NewEvent]:
        """The events that revoke every active grant of `agent` (its removal)."""
        return [
            NewEvent(agent, *c.event_of(c.GrantRevoked(domain=g.domain, reason=why)))
            for g in self.projection.of_agent(agent)
            if g.status == "active"
        ]

    async def revoke(self, agent: str, domain: str, operator: str) -> dict[str, str]:
        revoked = c.GrantRevoked(domain=domain, operator=operator)
        return await self._change(agent, domain, "active", revoked, "revoked")

    async def restore(self, agent: str, domain: str) -> dict[str, str]:
        return await self._change(
            agent, domain, "revoked", c.GrantRestored(domain=domain), "active"
        )

    async def _change(
        self, agent: str, domain: str, needed: str, event: c.Payload, result: str
    ) -> dict[str, str]:
        async with self._lock:
            grant = self.projection.get(agent, domain)
            if grant is None or grant.status != needed:
                raise Problem(404, f"no {needed} grant for agent {agent!r} and domain {domain!r}")
            ensure_local(self.ctx, agent)
            await self.ctx.store.append(agent, *c.event_of(event))
        return {"agent": agent, "domain": domain, "status": result}


GRANTS = web.AppKey("grants", GrantService)
