"""Secrets-broker grants: created from the config as events, listed, revoked and restored."""

from __future__ import annotations

import pytest

from node.app import build_app
from node.context import CONTEXT
from node.services.grants import GRANTS
from tests.support import OPERATE_TOKEN, READ_TOKEN, auth, make_config, replicate, tiny_component

AGENTS = """
[[agents]]
name = "payer"
component = "agent.wasm"
[agents.grants]
domains = ["payments", "banking"]

[[agents]]
name = "reader"
component = "agent.wasm"
[agents.grants]
domains = ["news"]
"""


@pytest.fixture
def config(tmp_path):
    tiny_component(tmp_path / "agent.wasm")
    return make_config(tmp_path, AGENTS)


@pytest.fixture
async def client(aiohttp_client, config):
    return await aiohttp_client(build_app(config))


def grants_of(client):
    return client.app[GRANTS]


async def grants(client):
    response = await client.get("/api/v1/broker/grants", headers=auth(READ_TOKEN))
    assert response.status == 200
    return await response.json()


async def test_configured_grants_are_created_as_events_on_first_start(client):
    listed = await grants(client)
    assert [(g["agent"], g["domain"], g["status"]) for g in listed] == [
        ("payer", "banking", "active"),
        ("payer", "payments", "active"),
        ("reader", "news", "active"),
    ]
    assert all(g["granted_at"].endswith("Z") and "revoked_at" not in g for g in listed)
    store = client.app[CONTEXT].store
    # the agent's own events (its start, or an error of the test component) may come first
    journal = [e for e in store.read_stream("payer", 0, 10) if e.event.type.startswith("grant.")]
    assert [(e.event.type, e.event.data) for e in journal] == [
        ("grant.created", {"domain": "payments"}),
        ("grant.created", {"domain": "banking"}),
    ]
    assert grants_of(client).is_active("payer", "payments")
    assert not grants_of(client).is_active("payer", "news")


async def test_revoke_bites_at_once_and_restore_brings_it_back(client):
    service = grants_of(client)
    url = "/api/v1/broker/grants/payer/payments"
    response = await client.post(f"{url}/revoke", headers=auth(OPERATE_TOKEN))
    assert response.status == 200
    assert await response.json() == {"agent": "payer", "domain": "payments", "status": "revoked"}
    assert not service.is_active("payer", "payments")  # the very next lookup is refused
    assert service.is_active("payer", "banking")
    revoked = next(g for g in await grants(client) if g["domain"] == "payments")
    assert revoked["status"] == "revoked" and revoked["revoked_at"] >= revoked["granted_at"]

    response = await client.post(f"{url}/restore", headers=auth(OPERATE_TOKEN))
    assert response.status == 200
    assert await response.json() == {"agent": "payer", "domain": "payments", "status": "active"}
    assert service.is_active("payer", "payments")
    restored = next(g for g in await grants(client) if g["domain"] == "payments")
    assert "revoked_at" not in restored and restored["granted_at"] == revoked["granted_at"]


async def test_revoke_without_an_active_grant_is_404(client):
    url = "/api/v1/broker/grants/payer/payments"
    assert (await client.post(f"{url}/revoke", headers=auth())).status == 200
    again = await client.post(f"{url}/revoke", headers=auth())
    assert again.status == 404
    assert "payments" in (await again.json())["detail"]
    for path in ("payer/unknown", "ghost/payments"):
        response = await client.post(f"/api/v1/broker/grants/{path}/revoke", headers=auth())
        assert response.status == 404


async def test_restore_without_a_revoked_grant_is_404(client):
    active = await client.post("/api/v1/broker/grants/payer/payments/restore", headers=auth())
    assert active.status == 404
    unknown = await client.post("/api/v1/broker/grants/payer/unknown/restore", headers=auth())
    assert unknown.status == 404
    journal = client.app[CONTEXT].store.read_stream("payer", 0, 10)
    # the agent itself may journal its start-up meanwhile; no grant event was added
    assert [e.event.type for e in journal if e.event.type.startswith("grant.")] == [
        "grant.created",
        "grant.created",
    ]


async def test_revoke_and_restore_need_the_operate_scope(client):
    url = "/api/v1/broker/grants/payer/payments/revoke"
    assert (await client.post(url)).status == 401
    assert (await client.post(url, headers=auth(READ_TOKEN))).status == 403
    assert grants_of(client).is_active("payer", "payments")


async def test_a_restart_keeps_revocations_and_grants_only_new_domains(tmp_path, aiohttp_client):
    tiny_component(tmp_path / "agent.wasm")
    config = make_config(tmp_path, AGENTS)
    first = await aiohttp_client(build_app(config))
    await first.post("/api/v1/broker/grants/payer/payments/revoke", headers=auth())
    await first.close()
    more = AGENTS.replace('["news"]', '["news", "weather"]')
    second = await aiohttp_client(build_app(make_config(tmp_path, more)))
    listed = {(g["agent"], g["domain"]): g["status"] for g in await grants(second)}
    assert listed == {
        ("payer", "banking"): "active",
        ("payer", "payments"): "revoked",
        ("reader", "news"): "active",
        ("reader", "weather"): "active",
    }
    created = [
        e
        for e in second.app[CONTEXT].store.read_stream("reader", 0, 10)
        if e.event.type == "grant.created"
    ]
    assert len(created) == 2


async def test_a_grant_of_an_agent_hosted_elsewhere_is_409(client):
    store = client.app[CONTEXT].store
    await replicate(store, "remote", "grant.created", {"domain": "payments"})
    listed = {(g["agent"], g["domain"]) for g in await grants(client)}
    assert ("remote", "payments") in listed
    response = await client.post("/api/v1/broker/grants/remote/payments/revoke", headers=auth())
    assert response.status == 409
    assert (await response.json())["home_node"] == "node-b"


async def test_a_domain_or_agent_dropped_from_the_config_is_revoked_at_the_next_start(
    tmp_path, aiohttp_client
):
    """Grants follow the deployment (issue 34): what runtime.toml no longer asks for is
    revoked, journaled with the reason, and an agent left out of it is retired."""
    tiny_component(tmp_path / "agent.wasm")
    first = await aiohttp_client(build_app(make_config(tmp_path, AGENTS)))
    response = await first.post("/api/v1/broker/grants/payer/banking/revoke", headers=auth())
    assert response.status == 200
    await first.close()
    fewer = AGENTS.replace('["payments", "banking"]', '["banking"]').split("[[agents]]")
    second = await aiohttp_client(build_app(make_config(tmp_path, "[[agents]]".join(fewer[:2]))))
    listed = {(g["agent"], g["domain"]): g for g in await grants(second)}
    assert {k: g["status"] for k, g in listed.items()} == {
        ("payer", "banking"): "revoked",
        ("payer", "payments"): "revoked",
    }
    assert listed["payer", "payments"]["revoked_reason"] == "no longer in its runtime.toml entry"
    assert listed["payer", "banking"]["revoked_by"] == "admin"  # the operator's, kept
    assert not grants_of(second).is_active("payer", "payments")
    reader = [(e.event.type, e.event.data) for e in second.app[CONTEXT].store.iter_stream("reader")]
    revoked_at = reader.index(
        (
            "grant.revoked",
            {
                "domain": "news",
                "reason": "agent removed: no longer declared in runtime.toml",
            },
        )
    )
    assert reader[revoked_at + 1][0] == "agent.retired"
    await second.close()
    # the domain back in the entry: the node's revoke is undone, the operator's stays
    third = await aiohttp_client(build_app(make_config(tmp_path, AGENTS)))
    listed = {(g["agent"], g["domain"]): g["status"] for g in await grants(third)}
    assert listed == {
        ("payer", "banking"): "revoked",
        ("payer", "payments"): "active",
        ("reader", "news"): "active",  # a fresh grant for the new deployment of `reader`
    }
