"""Secrets-broker grants: which (agent, domain) pairs are active, from grant.* events.

`granted_at` is the time of `grant.created` and stays through revoke/restore cycles;
`revoked_at` (and who or what revoked it) exists only while a grant is revoked. Events that do
not fit the current state (a revoke of a revoked grant, a second create) are ignored.
`agent.retired` ends every grant of its journal: a later deployment of the name starts afresh.
"""

from __future__ import annotations

import builtins
from typing import Any, Literal

import msgspec

from eventstore.envelope import Envelope
from projections import catalogue as c


class Grant(msgspec.Struct, kw_only=True):
    agent: str
    domain: str
    status: Literal["active", "revoked"]
    granted_at: str
    revoked_at: str | msgspec.UnsetType = msgspec.UNSET
    revoked_by: str | msgspec.UnsetType = msgspec.UNSET  # the operator's token name
    revoked_reason: str | msgspec.UnsetType = msgspec.UNSET  # the node's: a deployment change

    @property
    def dropped_by_deployment(self) -> bool:
        """Revoked by the node because a deployment stopped asking for it (not by a person):
        a later deployment that asks again gets it back."""
        return self.status == "revoked" and bool(self.revoked_reason) and not self.revoked_by


class Grants:
    name = "grants"
    handles = frozenset({c.GRANT_CREATED, c.GRANT_REVOKED, c.GRANT_RESTORED, c.AGENT_RETIRED})

    def __init__(self) -> None:
        self.grants: dict[tuple[str, str], Grant] = {}

    def apply(self, envelope: Envelope) -> None:
        kind = envelope.event.type
        if kind == c.AGENT_RETIRED:
            for key in [k for k in self.grants if k[0] == envelope.stream]:
                del self.grants[key]
            return
        if not kind.startswith("grant."):
            return
        data = envelope.event.data
        domain = data.get("domain")
        if not isinstance(domain, str):
            return
        key = (envelope.stream, domain)
        grant = self.grants.get(key)
        if kind == c.GRANT_CREATED and grant is None:
            self.grants[key] = Grant(
                agent=envelope.stream, domain=domain, status="active", granted_at=envelope.event.ts
            )
        elif kind == c.GRANT_REVOKED and grant is not None and grant.status == "active":
            grant.status = "revoked"
            grant.revoked_at = envelope.event.ts
            if isinstance(operator := data.get("operator"), str):
                grant.revoked_by = operator
            if isinstance(reason := data.get("reason"), str) and reason:
                grant.revoked_reason = reason
        elif kind == c.GRANT_RESTORED and grant is not None and grant.status == "revoked":
            grant.status = "active"
            grant.revoked_at = grant.revoked_by = grant.revoked_reason = msgspec.UNSET

    def get(self, agent: str, domain: str) -> Grant | None:
        return self.grants.get((agent, domain))

    def is_active(self, agent: str, domain: str) -> bool:
        grant = self.grants.get((agent, domain))
        return grant is not None and grant.status == "active"

    def of_agent(self, agent: str) -> builtins.list[Grant]:
        return [g for (name, _), g in sorted(self.grants.items()) if name == agent]

    def list(self) -> builtins.list[Grant]:
        """Every grant, ordered by agent then domain."""
        return [self.grants[k] for k in sorted(self.grants)]

    def snapshot(self) -> builtins.list[Any]:
        return [msgspec.to_builtins(g) for g in self.list()]
