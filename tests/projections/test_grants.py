"""Grants: (agent, domain) pairs created active, revoked and restored; misfits are ignored."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from projections.grants import Grant, Grants
from tests.projections.envelopes import Journal, envelope, fold, refolded_snapshot, ts_at


def test_a_created_grant_is_active() -> None:
    j = Journal()
    j.add("alice", "grant.created", {"domain": "api.example.com"})
    grants = fold(Grants(), j.envelopes)
    grant = Grant(agent="alice", domain="api.example.com", status="active", granted_at=ts_at(1))
    assert grants.get("alice", "api.example.com") == grant
    assert grants.is_active("alice", "api.example.com")
    assert grants.list() == [grant]
    assert msgspec.to_builtins(grant) == {  # no revoked_at while active
        "agent": "alice",
        "domain": "api.example.com",
        "status": "active",
        "granted_at": ts_at(1),
    }


def test_revoke_then_restore_keeps_granted_at() -> None:
    j = Journal()
    j.add("alice", "grant.created", {"domain": "d"})
    j.add("alice", "grant.revoked", {"domain": "d"})
    grants = fold(Grants(), j.envelopes)
    grant = grants.get("alice", "d")
    assert grant is not None
    assert (grant.status, grant.revoked_at, grant.granted_at) == ("revoked", ts_at(2), ts_at(1))
    assert not grants.is_active("alice", "d")
    j.add("alice", "grant.restored", {"domain": "d"})
    grants = fold(Grants(), j.envelopes)
    grant = grants.get("alice", "d")
    assert grant is not None
    assert (grant.status, grant.revoked_at, grant.granted_at) == ("active", msgspec.UNSET, ts_at(1))
    assert grants.is_active("alice", "d")
    j.add("alice", "grant.revoked", {"domain": "d"})  # a second cycle: the newest revoke time
    grant = fold(Grants(), j.envelopes).get("alice", "d")
    assert grant is not None and grant.revoked_at == ts_at(4)


def test_events_that_do_not_fit_the_state_are_ignored() -> None:
    j = Journal()
    j.add("alice", "grant.revoked", {"domain": "d"})  # nothing to revoke
    j.add("alice", "grant.restored", {"domain": "d"})  # nothing to restore
    j.add("alice", "grant.created", {"domain": "d"})
    j.add("alice", "grant.restored", {"domain": "d"})  # already active
    j.add("alice", "grant.created", {"domain": "d"})  # a second create
    j.add("alice", "grant.revoked", {"domain": "d"})
    j.add("alice", "grant.revoked", {"domain": "d"})  # already revoked: keeps the first time
    grants = fold(Grants(), j.envelopes)
    assert grants.list() == [
        Grant(agent="alice", domain="d", status="revoked", granted_at=ts_at(3), revoked_at=ts_at(6))
    ]


def test_grants_are_per_journal() -> None:
    """The agent is the journal: bob revoking alice's domain revokes nothing of alice's."""
    j = Journal()
    j.add("alice", "grant.created", {"domain": "d"})
    j.add("bob", "grant.revoked", {"domain": "d"})
    grants = fold(Grants(), j.envelopes)
    assert grants.is_active("alice", "d")
    assert grants.get("bob", "d") is None
    assert not grants.is_active("bob", "d")
    assert not grants.is_active("alice", "other")


@pytest.mark.parametrize("data", [{}, {"domain": 1}, {"domain": None}])
def test_an_event_without_a_string_domain_is_ignored(data: dict[str, Any]) -> None:
    grants = Grants()
    grants.apply(envelope("alice", 1, "grant.created", data, position=1))
    assert grants.list() == []


def test_other_event_types_change_nothing() -> None:
    grants = Grants()
    grants.apply(envelope("alice", 1, "log", {"domain": "d"}, position=1))
    grants.apply(envelope("alice", 2, "grant.unknown", {"domain": "d"}, position=2))
    assert grants.list() == []
    assert "log" not in grants.handles


def test_list_orders_by_agent_then_domain_and_snapshot_refolds_equal() -> None:
    j = Journal()
    j.add("bob", "grant.created", {"domain": "b.example"})
    j.add("alice", "grant.created", {"domain": "z.example"})
    j.add("alice", "grant.created", {"domain": "a.example"})
    j.add("alice", "grant.revoked", {"domain": "z.example"})
    grants = fold(Grants(), j.envelopes)
    assert [(g.agent, g.domain, g.status) for g in grants.list()] == [
        ("alice", "a.example", "active"),
        ("alice", "z.example", "revoked"),
        ("bob", "b.example", "active"),
    ]
    # Any: mypy reads `list[Any]` in Grants' class body as its method `list`
    snapshot: Any = grants.snapshot()
    assert snapshot[1]["revoked_at"] == ts_at(4)
    assert "revoked_at" not in snapshot[0]
    assert refolded_snapshot(grants, j.envelopes) == snapshot
