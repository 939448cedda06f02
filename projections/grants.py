"""Secrets-broker grants: which (agent, domain) pairs are active, from grant.* events.

`granted_at` is the time of `grant.created` and stays through revoke/restore cycles;
`revoked_at` exists only while a grant is revoked. Events that do not fit the current state
(a revoke of a revoked grant, a second create) are ignored.
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


class Grants:
    name = "grants"
    handles = frozenset({c.GRANT_CREATED, c.GRANT_REVOKED, c.GRANT_RESTORED})

    def __init__(self) -> None:
        self.grants: dict[tuple[str, str], Grant] = {}

    def apply(self, envelope: Envelope) -> None:
        kind = envelope.event.type
        if not kind.startswith("grant."):
            return
        domain = envelope.event.data.get("domain")
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
        elif kind == c.GRANT_RESTORED and grant is not None and grant.status == "revoked":
            grant.status = "active"
            grant.revoked_at = msgspec.UNSET

    def get(self, agent: str, domain: str) -> Grant | None:
        return self.grants.get((agent, domain))

    def is_active(self, agent: str, domain: str) -> bool:
        grant = self.grants.get((agent, domain))
        return grant is not None and grant.status == "active"

    def list(self) -> builtins.list[Grant]:
        """Every grant, ordered by agent then domain."""
        return [self.grants[k] for k in sorted(self.grants)]

    def snapshot(self) -> builtins.list[Any]:
        return [msgspec.to_builtins(g) for g in self.list()]
