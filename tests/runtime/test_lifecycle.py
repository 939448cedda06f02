"""Agents as a live resource, in a running node: deploy from the registry, upgrade (state,
grants and a task in flight kept), automatic rollback of a broken upgrade, stop/start,
rollback, remove, the config-vs-API rule and the admin scope. Real components from
build/agents/, published to the node's real registry over HTTP."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import FormData

from node.app import build_app
from node.config.model import ConfigError
from node.context import CONTEXT
from node.runtime.agents import AGENTS
from node.runtime.compiled_cache import COMPILED_CACHE_ENV
from node.services.approvals import APPROVALS
from node.services.deployments import DEPLOYMENTS
from projections.grants import Grants
from tests.polling import until
from tests.runtime.test_runtime_node import agent_toml, journal
from tests.runtime_support import COMPILED_CACHE
from tests.support import (
    ADMIN_TOKEN,
    OPERATE_TOKEN,
    PUBLISH_TOKEN,
    READ_TOKEN,
    auth,
    make_config,
    outcome,
)


@pytest.fixture(autouse=True)
def shared_compiled_cache(monkeypatch):
    monkeypatch.setenv(COMPILED_CACHE_ENV, str(COMPILED_CACHE))


async def publish(client, package: str, version: str, wasm_path) -> None:
    data = FormData(default_to_multipart=True)
    data.add_field("id", package)
    data.add_field("version", version)
    data.add_field("wasm", wasm_path.read_bytes(), filename="a.wasm")
    response = await client.post(
        "/api/v1/registry/packages", data=data, headers=auth(PUBLISH_TOKEN)
    )
    assert response.status == 201, await response.text()


async def put(client, name: str, body: dict, token: str = ADMIN_TOKEN):
    return await client.put(f"/api/v1/agents/{name}", json=body, headers=auth(token))


async def post(client, name: str, verb: str, token: str = ADMIN_TOKEN):
    return await client.post(f"/api/v1/agents/{name}/{verb}", headers=auth(token))


async def get(client, name: str) -> dict:
    response = await client.get(f"/api/v1/agents/{name}", headers=auth(READ_TOKEN))
    assert response.status == 200, await response.text()
    return await response.json()


def node_events(app, type_: str | None = None) -> list[dict]:
    return journal(app, "$node", type_)


async def create_task(client, task_input: dict, to: str = "worker") -> str:
    body = {"from": "planner", "to": to, "input": task_input}
    response = await client.post("/api/v1/a2a/tasks", json=body, headers=auth(OPERATE_TOKEN))
    assert response.status == 201, await response.text()
    return (await response.json())["id"]


async def status_of(client, name: str) -> str:
    response = await client.get(f"/api/v1/status?agent={name}", headers=auth(READ_TOKEN))
    return (await response.json())[0]["status"]


async def test_deploy_upgrade_keeps_state_and_grants_and_rolls_back_a_broken_one(
    aiohttp_client, tmp_path, built_agents
):
    toml = '[secrets.payments]\napi_key = "secret-value-123"\n'
    app = build_app(make_config(tmp_path, toml))
    client = await aiohttp_client(app)
    await publish(client, "tools", "1.0.0", built_agents["mcp_tools"])
    await publish(client, "tools", "2.0.0", built_agents["secrets_reader"])
    await publish(client, "tools", "3.0.0", built_agents["bad_trap"])

    # deploy a new agent on the running node: it runs
    body = {
        "component": "registry:tools@1.0.0",
        "mcp": True,
        "tick_interval_ms": 100,
        "grant_domains": ["payments"],
    }
    response = await put(client, "tools", body)
    assert response.status == 201, await response.text()
    answer = await response.json()
    assert answer["message"] == "deployed as revision 1"
    agent = answer["agent"]
    assert agent["source"] == "api" and agent["current"]["version"] == "1.0.0"
    assert agent["current"]["sha256"].startswith("sha256:")
    (deployed,) = node_events(app, "agent.deployed")
    assert deployed["definition"]["grant_domains"] == ["payments"]
    assert deployed["operator"] == "admin" and deployed["source"] == "api"
    # an MCP call through the deployed agent writes state
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
    call["params"] = {"name": "remember", "arguments": {"note": "kept across upgrades"}}
    mcp = await client.post("/api/v1/mcp/tools", json=call, headers=auth(OPERATE_TOKEN))
    assert mcp.status == 200, await mcp.text()
    assert journal(app, "tools", "state.set")[0]["value"] == "kept across upgrades"
    # the operator revokes the grant: an upgrade must not bring it back
    revoked = await client.post(
        "/api/v1/broker/grants/tools/payments/revoke", headers=auth(OPERATE_TOKEN)
    )
    assert revoked.status == 200

    # same deployment again: nothing changes
    same = await put(client, "tools", body)
    assert same.status == 200 and "nothing changed" in (await same.json())["message"]

    # upgrade to another component, keeps state and grants
    upgrade = {**body, "component": "registry:tools@2.0.0", "capabilities": {}}
    response = await put(client, "tools", upgrade)
    assert response.status == 200, await response.text()
    answer = await response.json()
    assert answer["message"].startswith("upgraded to revision 2; on probation for 3 good run")
    assert answer["agent"]["rollout"]["state"] == "probation"
    assert answer["agent"]["current"]["version"] == "2.0.0"
    assert [d["revision"] for d in answer["agent"]["previous"]] == [1]
    worker = app[AGENTS].runtime.worker("tools")
    assert str(worker.spec.component) == "registry:tools@2.0.0"
    assert worker.host.state_get("note") == "kept across upgrades"  # from the journal
    # the revoked grant stayed revoked: the new version is refused the secret
    await until(lambda: journal(app, "tools", "state.set")[-1]["value"] == "denied")
    grants = await (await client.get("/api/v1/broker/grants", headers=auth(READ_TOKEN))).json()
    assert [(g["agent"], g["status"]) for g in grants] == [("tools", "revoked")]

    # an upgrade whose first tick traps rolls back by itself and says why
    response = await put(client, "tools", {**upgrade, "component": "registry:tools@3.0.0"})
    assert response.status == 422
    problem = await response.json()
    assert "rolled back to revision 2" in problem["detail"]
    assert "out of bounds" in problem["detail"] or "trap" in problem["detail"]
    (rolled,) = node_events(app, "agent.rolled_back")
    assert rolled["automatic"] is True and rolled["from_revision"] == 3
    assert rolled["to_revision"] == 2 and "revision 3 failed" in rolled["reason"]
    after = await get(client, "tools")
    assert after["current"]["revision"] == 2 and after["current"]["version"] == "2.0.0"
    assert [h["event"] for h in after["history"]] == [
        "deployed",
        "upgraded",
        "upgraded",
        "rolled_back",
    ]
    await until(lambda: app[AGENTS].runtime.worker("tools").probation.done())
    assert app[AGENTS].runtime.worker("tools").probation.result() is None

    # an operator's rollback: back to revision 1 (mcp_tools)
    response = await post(client, "tools", "rollback")
    assert response.status == 200, await response.text()
    assert (await response.json())["agent"]["current"]["version"] == "1.0.0"
    again = await post(client, "tools", "rollback")
    assert again.status == 409 and "no earlier deployment" in (await again.json())["detail"]

    # stop and start; remove: gone from the list, its journal kept
    stopped = await post(client, "tools", "stop")
    assert stopped.status == 200 and (await stopped.json())["agent"]["stopped"] is True
    assert await status_of(client, "tools") == "stopped"
    started = await post(client, "tools", "start")
    assert started.status == 200 and (await started.json())["agent"]["stopped"] is False
    await until(lambda: app[AGENTS].runtime.worker("tools").probation.done())
    removed = await client.delete("/api/v1/agents/tools", headers=auth(ADMIN_TOKEN))
    assert removed.status == 200 and (await removed.json())["agent"] is None
    listed = await (await client.get("/api/v1/agents", headers=auth(READ_TOKEN))).json()
    assert listed == []
    assert (await client.get("/api/v1/agents/tools", headers=auth(READ_TOKEN))).status == 404
    assert journal(app, "tools", "state.set")  # the journal stays
    assert "tools" not in app[AGENTS].runtime.workers
    assert app[CONTEXT].config.agent("tools") is None


async def test_a_task_in_flight_during_an_upgrade_completes_and_queued_ones_wait_while_stopped(
    aiohttp_client, tmp_path, built_agents
):
    app = build_app(make_config(tmp_path))
    client = await aiohttp_client(app)
    await publish(client, "worker", "1.0.0", built_agents["task_worker"])
    await publish(client, "worker", "1.0.1", built_agents["task_worker"])
    # a generous run budget: the task's length is journal appends, slow on a loaded host
    body = {
        "component": "registry:worker@1.0.0",
        "tick_interval_ms": 100,
        "tick_timeout_ms": 300_000,
    }
    assert (await put(client, "worker", body)).status == 201

    numbers = list(range(1000))  # one journaled progress event each: long enough to upgrade
    task_id = await create_task(client, {"numbers": numbers})
    await until(lambda: journal(app, "worker", "task.progress"))
    response = await put(client, "worker", {**body, "component": "registry:worker@1.0.1"})
    assert response.status == 200, await response.text()
    store = app[CONTEXT].store
    (completed,) = [e for e in store.iter_stream("worker") if e.event.type == "task.completed"]
    assert completed.event.data["id"] == task_id
    assert completed.event.data["output"] == {"sum": sum(numbers), "count": 1000}
    # in flight when the upgrade began, finished by the old instance before the new one started
    (upgraded,) = [e for e in store.iter_stream("$node") if e.event.type == "agent.upgraded"]
    starts = [e for e in store.iter_stream("worker") if e.event.type == "agent.started"]
    assert len(starts) == 2
    assert upgraded.position < completed.position < starts[1].position
    assert not journal(app, "worker", "task.failed")

    # stopped: a new task stays queued; started: it is done
    assert (await post(client, "worker", "stop")).status == 200
    queued_id = await create_task(client, {"numbers": [1, 2]})
    assert (await post(client, "worker", "stop")).status == 200  # again: nothing to do
    assert all(e["id"] != queued_id for e in journal(app, "worker", "task.started"))
    assert (await post(client, "worker", "start")).status == 200
    await until(lambda: any(e["id"] == queued_id for e in journal(app, "worker", "task.completed")))


async def test_config_agents_are_shown_apart_and_the_api_refuses_to_change_them(
    aiohttp_client, tmp_path, built_agents
):
    toml = agent_toml("hello", built_agents["hello"], "tick_interval_ms = 200")
    app = build_app(make_config(tmp_path, toml))
    client = await aiohttp_client(app)
    hello = await get(client, "hello")
    assert hello["source"] == "config" and hello["current"]["revision"] == 1
    assert hello["current"]["version"] is None
    assert hello["current"]["component"] == str(built_agents["hello"])
    await publish(client, "hello", "1.0.0", built_agents["hello"])
    response = await put(client, "hello", {"component": "registry:hello@1.0.0"})
    assert response.status == 409 and "runtime.toml" in (await response.json())["detail"]
    assert (await client.delete("/api/v1/agents/hello", headers=auth())).status == 409
    assert (await post(client, "hello", "rollback")).status == 409
    # stop and start apply to any agent
    assert (await post(client, "hello", "stop")).status == 200
    assert (await post(client, "hello", "start")).status == 200
    # bad input: a file path, an unknown package, an approval rule without its capability
    for body, status, words in (
        ({"component": str(built_agents["hello"])}, 400, "registry"),
        ({"component": "registry:nope@1.0.0"}, 404, "not published"),
        ({"component": "registry:hello@1.0.0", "approval": {"spend": True}}, 400, "capability"),
        ({"component": "registry:hello@1.0.0", "surprise": 1}, 400, "surprise"),
        ({"component": "registry:hello@1.0.0", "tick_interval_ms": 0}, 400, "tick_interval_ms"),
    ):
        response = await put(client, "fresh", body)
        assert response.status == status, (body, await response.text())
        assert words in (await response.json())["detail"]
    # only admin may change agents
    for token in (READ_TOKEN, OPERATE_TOKEN, PUBLISH_TOKEN):
        response = await put(client, "fresh", {"component": "registry:hello@1.0.0"}, token)
        assert response.status == 403
        assert (await post(client, "hello", "stop", token)).status == 403


async def test_a_config_that_declares_an_api_deployed_agent_stops_the_start(
    aiohttp_client, tmp_path, built_agents
):
    app = build_app(make_config(tmp_path))
    client = await aiohttp_client(app)
    await publish(client, "hello", "1.0.0", built_agents["hello"])
    assert (await put(client, "greeter", {"component": "registry:hello@1.0.0"})).status == 201
    await client.close()

    toml = agent_toml("greeter", built_agents["hello"])
    again = build_app(make_config(tmp_path, toml))
    with pytest.raises(ConfigError, match="deployed through the API"):
        await aiohttp_client(again)


async def test_a_task_cut_by_a_drain_timeout_is_handed_to_the_new_instance(
    aiohttp_client, tmp_path, built_agents
):
    app = build_app(make_config(tmp_path))
    client = await aiohttp_client(app)
    app[DEPLOYMENTS].drain_secs = 0.5  # the old instance waits on an approval past this
    await publish(client, "cashier", "1.0.0", built_agents["cashier"])
    body = {
        "component": "registry:cashier@1.0.0",
        "capabilities": {"spend": True},
        "approval": {"spend": True},
        "tick_interval_ms": 200,
    }
    assert (await put(client, "cashier", body)).status == 201
    task_id = await create_task(client, {"pay": {"invoice": "INV-7"}}, to="cashier")

    async def pending() -> list[dict]:
        return await (await client.get("/api/v1/approvals", headers=auth(READ_TOKEN))).json()

    (first,) = await until(pending, 20, "the cashier asks to pay")
    response = await put(client, "cashier", {**body, "tick_interval_ms": 300})
    assert response.status == 200, await response.text()
    assert "upgraded to revision 2" in (await response.json())["message"]
    # the cut run finished nothing; the new instance took the task and asks again
    assert not journal(app, "cashier", "task.completed")
    assert not journal(app, "cashier", "task.failed")
    await until(lambda: app[AGENTS].runtime.worker("cashier").status().status == "running")

    async def asked_again() -> list[dict]:
        return [a for a in await pending() if a["id"] != first["id"]]

    # the new instance asks anew (what becomes of the request the old instance left is the
    # approval gate's business: DeploymentService.instance_ended is its hook)
    (again,) = await until(asked_again, 20, "the new instance asks to pay")
    assert again["task"] == task_id and again["request_hash"] == first["request_hash"]
    decided = await client.post(
        f"/api/v1/approvals/{again['id']}", json={"decision": "deny"}, headers=auth(OPERATE_TOKEN)
    )
    assert decided.status == 200
    (completed,) = await until(lambda: journal(app, "cashier", "task.completed"), 20)
    assert completed["id"] == task_id and completed["output"]["paid"] is False
    assert not journal(app, "cashier", "task.failed")


async def test_stopping_an_agent_abandons_what_it_left_pending(
    aiohttp_client, tmp_path, built_agents
):
    """Issue 29 item 4: an approval its ended instance asked for can never apply."""
    toml = agent_toml("hello", built_agents["hello"], "tick_interval_ms = 60000")
    app = build_app(make_config(tmp_path, toml))
    client = await aiohttp_client(app)
    gate = app[APPROVALS]
    await until(lambda: journal(app, "hello", "agent.started"), what="hello runs")
    asked = asyncio.create_task(outcome(gate.ask("hello", "spend", "INV-7", 60)))
    await until(lambda: gate.projection.count, what="the request is pending")
    (approval_id,) = [r.id for r in gate.projection.list()]
    asked.cancel()  # the call that asked is gone, as when its instance is cut off
    assert (await post(client, "hello", "stop")).status == 200
    await until(lambda: gate.projection.resolution(approval_id), what="the request is closed")
    resolution = gate.projection.resolution(approval_id)
    assert resolution is not None and resolution.outcome == "abandoned"
    assert (resolution.reason or "").startswith("hello's instance ended")
    decided = await client.post(
        f"/api/v1/approvals/{approval_id}", json={"decision": "approve"}, headers=auth()
    )
    assert decided.status == 409 and "abandoned" in (await decided.json())["detail"]


def grants_of(app, agent: str) -> dict[str, str]:
    return {g.domain: g.status for g in app[CONTEXT].projections.get(Grants).of_agent(agent)}


async def test_grants_follow_the_deployment_and_a_removed_name_starts_with_nothing(
    aiohttp_client, tmp_path, built_agents
):
    """Issue 34: an upgrade that drops a domain revokes it (journaled, with the reason), a
    later revision that asks again gets it back; a removal revokes everything, cancels open
    tasks and retires the state, so a new deployment of the name inherits nothing."""
    toml = '[secrets.payments]\napi_key = "secret-value-123"\n'
    app = build_app(make_config(tmp_path, toml))
    client = await aiohttp_client(app)
    await publish(client, "reader", "1.0.0", built_agents["secrets_reader"])
    await publish(client, "tools", "1.0.0", built_agents["mcp_tools"])
    body = {"component": "registry:reader@1.0.0", "tick_interval_ms": 50}
    granted = {**body, "grant_domains": ["payments"]}

    def status() -> str:
        states = journal(app, "reader", "state.set")
        return states[-1]["value"] if states else ""

    assert (await put(client, "reader", granted)).status == 201
    await until(lambda: status() == "ok:16")
    assert grants_of(app, "reader") == {"payments": "active"}

    # an upgrade that drops the domain: revoked by the node, and the new revision is refused
    response = await put(client, "reader", {**body, "tick_interval_ms": 60})
    assert response.status == 200, await response.text()
    assert grants_of(app, "reader") == {"payments": "revoked"}
    revoked = journal(app, "reader", "grant.revoked")[-1]
    assert revoked == {
        "type": "grant.revoked",
        "domain": "payments",
        "reason": "not asked for by revision 2",
    }
    await until(lambda: status() == "denied")
    # an operator's restore does not reach a revision that does not ask for the domain
    restore = await client.post(
        "/api/v1/broker/grants/reader/payments/restore", headers=auth(OPERATE_TOKEN)
    )
    assert restore.status == 200
    count = len(journal(app, "reader", "state.set"))
    await until(lambda: len(journal(app, "reader", "state.set")) >= count + 2)
    assert status() == "denied"
    # a rollback to revision 1, which asks for it: active again, and read
    assert (await post(client, "reader", "rollback")).status == 200
    await until(lambda: status() == "ok:16")

    # an operator's revoke stays through a new revision that asks for the domain
    assert (
        await client.post(
            "/api/v1/broker/grants/reader/payments/revoke", headers=auth(OPERATE_TOKEN)
        )
    ).status == 200
    assert journal(app, "reader", "grant.revoked")[-1]["operator"] == "operator"
    assert (await put(client, "reader", {**granted, "tick_interval_ms": 70})).status == 200
    assert grants_of(app, "reader") == {"payments": "revoked"}
    restore = await client.post(
        "/api/v1/broker/grants/reader/payments/restore", headers=auth(OPERATE_TOKEN)
    )
    assert restore.status == 200
    await until(lambda: status() == "ok:16")

    # remove: grants revoked, open tasks canceled, state retired, in one journaled write
    assert (await post(client, "reader", "stop")).status == 200  # its task stays open
    task = await create_task(client, {"n": 1}, to="reader")
    removed = await client.delete("/api/v1/agents/reader", headers=auth(ADMIN_TOKEN))
    assert removed.status == 200, await removed.text()
    assert "starts with no state" in (await removed.json())["message"]
    assert grants_of(app, "reader") == {}
    tail = [e["type"] for e in journal(app, "reader")][-3:]
    assert tail == ["grant.revoked", "task.canceled", "agent.retired"]
    assert journal(app, "reader", "task.canceled")[-1] == {
        "type": "task.canceled",
        "id": task,
        "operator": "admin",
    }
    canceled = await client.get(f"/api/v1/a2a/tasks/{task}", headers=auth(READ_TOKEN))
    assert (await canceled.json())["status"] == "failed"  # the spec's word for canceled

    # a new deployment under the removed name (another component, which never sets
    # `secret_status`): none of the old state, no grant
    assert (await put(client, "reader", {"component": "registry:tools@1.0.0"})).status == 201
    assert app[AGENTS].runtime.worker("reader").host.state_get("secret_status") is None
    assert grants_of(app, "reader") == {}
    # a later revision that asks for the domain gets a fresh grant, not the old deployment's
    assert (await put(client, "reader", {**granted, "tick_interval_ms": 80})).status == 200
    assert grants_of(app, "reader") == {"payments": "active"}
    await until(lambda: status() == "ok:16")
