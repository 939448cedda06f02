"""Rollouts that watch and changes that do not wait in silence (issue 37 items 2 and 3), in a
running node with real components published to its registry over HTTP.

- A stop, upgrade, rollback or removal of an agent whose run only waits for an approval ends
  that run at once, closes the request (`approval.abandoned`, with the reason), and answers
  within 2 s; a drain still waits for real work, and says what it waits for.
- After an upgrade, a probation window: a release that breaks on its second tick is rolled
  back by the node (journaled, automatic, with the reason); a healthy one passes.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from node.app import build_app
from node.config.load import load_config
from node.runtime.agents import AGENTS
from node.services.approvals import APPROVALS
from node.services.deployments import DEPLOYMENTS
from tests.polling import until
from tests.runtime.test_lifecycle import (
    create_task,
    get,
    node_events,
    post,
    publish,
    put,
    shared_compiled_cache,  # noqa: F401  (the autouse fixture: the compiled cache)
)
from tests.runtime.test_runtime_node import journal
from tests.support import READ_TOKEN, auth, write_config

QUICK_SECS = 2.0  # what "returns within 2 s" means for a change of an agent waiting on a person


def node_app(tmp_path, node_keys: str = ""):
    """The node app; `node_keys` are added to its [node] table (the probation's keys)."""
    path = write_config(tmp_path)
    path.write_text(path.read_text().replace("[node]\n", "[node]\n" + node_keys, 1))
    return build_app(load_config(path))


async def pending(client) -> list[dict]:
    return await (await client.get("/api/v1/approvals", headers=auth(READ_TOKEN))).json()


async def asked_anew(client, before: set[str]) -> dict:
    fresh = await until(
        lambda: _fresh(client, before), 60, "the payer asks for an approval (again)"
    )
    return fresh


async def _fresh(client, before: set[str]) -> dict | None:
    return next((a for a in await pending(client) if a["id"] not in before), None)


async def timed(call) -> tuple[float, object]:
    start = time.monotonic()
    response = await call
    return time.monotonic() - start, response


async def test_changes_of_an_agent_waiting_for_an_approval_answer_at_once(
    aiohttp_client, tmp_path, built_agents
):
    app = node_app(tmp_path)
    client = await aiohttp_client(app)
    gate = app[APPROVALS]
    await publish(client, "payer", "1.0.0", built_agents["payer"])
    await publish(client, "payer", "1.1.0", built_agents["payer"])
    body = {
        "component": "registry:payer@1.0.0",
        "capabilities": {"spend": True},
        "approval": {"spend": True, "timeout_secs": 600},
        "tick_interval_ms": 100,
    }
    assert (await put(client, "payer", body)).status == 201
    seen: set[str] = set()

    async def closed_with(approval_id: str, words: str) -> None:
        await until(lambda: gate.projection.resolution(approval_id), 10, "the request is closed")
        resolution = gate.projection.resolution(approval_id)
        assert resolution.outcome == "abandoned", resolution
        assert words in (resolution.reason or ""), resolution.reason

    # stop: the run waiting for the operator ends now, the request is closed, saying why
    waiting = await asked_anew(client, seen)
    seen.add(waiting["id"])
    took, response = await timed(post(client, "payer", "stop"))
    assert response.status == 200, await response.text()
    assert took < QUICK_SECS, f"stop took {took:.1f} s"
    print(f"stop of a payer waiting for an approval answered in {took:.2f} s")
    await closed_with(waiting["id"], "payer's instance ended: suspended")
    assert journal(app, "payer", "approval.abandoned")[-1]["id"] == waiting["id"]
    assert (await get(client, "payer"))["status"] == "stopped"
    response = await client.get("/api/v1/status?agent=payer", headers=auth(READ_TOKEN))
    (status,) = await response.json()
    assert status["status"] == "stopped" and status["uptime_ms"] == 0
    assert status["phase"] == "stopped" and "stopped by an operator" in status["reason"]

    # upgrade (started first): the same
    assert (await post(client, "payer", "start")).status == 200
    waiting = await asked_anew(client, seen)
    seen.add(waiting["id"])
    upgrade = {**body, "component": "registry:payer@1.1.0"}
    took, response = await timed(put(client, "payer", upgrade))
    assert response.status == 200, await response.text()
    assert took < QUICK_SECS, f"upgrade took {took:.1f} s"
    print(f"upgrade of a payer waiting for an approval answered in {took:.2f} s")
    await closed_with(waiting["id"], "upgraded to revision 2")

    # rollback: the new instance asked again; the same
    waiting = await asked_anew(client, seen)
    seen.add(waiting["id"])
    took, response = await timed(post(client, "payer", "rollback"))
    assert response.status == 200, await response.text()
    assert took < QUICK_SECS, f"rollback took {took:.1f} s"
    print(f"rollback of a payer waiting for an approval answered in {took:.2f} s")
    await closed_with(waiting["id"], "rolled back to revision 1")

    # removal: the same
    waiting = await asked_anew(client, seen)
    took, response = await timed(client.delete("/api/v1/agents/payer", headers=auth()))
    assert response.status == 200, await response.text()
    assert took < QUICK_SECS, f"removal took {took:.1f} s"
    print(f"removal of a payer waiting for an approval answered in {took:.2f} s")
    await closed_with(waiting["id"], "removed")
    assert await pending(client) == []


async def test_a_drain_waits_for_real_work_and_says_what_it_waits_for(
    aiohttp_client, tmp_path, built_agents
):
    app = node_app(tmp_path)
    # the run's progress writes are durable: on a slow disk they outlast the 30 s default
    app[DEPLOYMENTS].drain_secs = 300
    client = await aiohttp_client(app)
    await publish(client, "worker", "1.0.0", built_agents["task_worker"])
    body = {
        "component": "registry:worker@1.0.0",
        "tick_interval_ms": 100,
        "tick_timeout_ms": 300_000,
    }
    assert (await put(client, "worker", body)).status == 201
    task_id = await create_task(client, {"numbers": list(range(1000))})
    await until(lambda: journal(app, "worker", "task.progress"))
    stopping = asyncio.ensure_future(post(client, "worker", "stop"))

    async def draining() -> dict | None:
        change = (await get(client, "worker"))["change"]
        return change if change and "draining" in change["step"] else None

    change = await until(draining, 20, "the stop shows its drain")
    assert change["action"] == "stop"
    assert f"task {task_id}" in change["step"], change  # the run it waits for
    response = await stopping
    assert response.status == 200, await response.text()
    (completed,) = journal(app, "worker", "task.completed")  # the real work finished
    assert completed["id"] == task_id
    assert (await get(client, "worker"))["change"] is None


@pytest.mark.timeout(300)
async def test_a_release_that_breaks_on_its_second_tick_is_rolled_back_by_its_probation(
    aiohttp_client, tmp_path, built_agents
):
    app = node_app(tmp_path, "probation_ticks = 5\nprobation_secs = 60\n")
    client = await aiohttp_client(app)
    await publish(client, "greeter", "1.0.0", built_agents["hello"])
    await publish(client, "greeter", "2.0.0", built_agents["bad_second_tick"])
    body = {"component": "registry:greeter@1.0.0", "tick_interval_ms": 200}
    assert (await put(client, "greeter", body)).status == 201

    # its first tick works: the upgrade is answered, on probation
    response = await put(client, "greeter", {**body, "component": "registry:greeter@2.0.0"})
    assert response.status == 200, await response.text()
    answer = await response.json()
    assert "on probation for 5 good run(s) or 60 s" in answer["message"]
    rollout = answer["agent"]["rollout"]
    assert rollout["revision"] == 2 and rollout["state"] == "probation"
    assert rollout["ticks_needed"] == 5 and rollout["window_secs"] == 60

    async def ended() -> dict | None:
        rollout = (await get(client, "greeter"))["rollout"]
        return rollout if rollout["state"] not in ("probation", "rolling_back") else None

    rollout = await until(ended, 60, "the probation ends")
    assert rollout["state"] == "rolled_back" and rollout["rolled_back_to"] == 1, rollout
    assert rollout["faults"] == 1 and "tick 2 or later of this instance" in rollout["reason"]
    (rolled,) = node_events(app, "agent.rolled_back")
    assert rolled["automatic"] is True and rolled["from_revision"] == 2
    assert rolled["to_revision"] == 1
    assert rolled["reason"].startswith("revision 2 failed its probation: 1 fault(s)")
    agent = await get(client, "greeter")
    assert agent["current"]["revision"] == 1
    assert agent["history"][-1]["event"] == "rolled_back" and agent["history"][-1]["automatic"]
    worker = app[AGENTS].runtime.worker("greeter")
    assert str(worker.spec.component) == "registry:greeter@1.0.0"
    await until(lambda: worker.status().good_runs >= 2, 30, "revision 1 runs again")
    assert worker.status().faults == 0


async def test_a_healthy_upgrade_passes_its_probation_and_an_operator_change_ends_one(
    aiohttp_client, tmp_path, built_agents
):
    app = node_app(tmp_path, "probation_ticks = 3\nprobation_secs = 120\n")
    client = await aiohttp_client(app)
    for version in ("1.0.0", "1.0.1", "1.0.2"):
        await publish(client, "greeter", version, built_agents["hello"])
    body = {"component": "registry:greeter@1.0.0", "tick_interval_ms": 100}
    assert (await put(client, "greeter", body)).status == 201
    response = await put(client, "greeter", {**body, "component": "registry:greeter@1.0.1"})
    assert response.status == 200, await response.text()

    async def state() -> str:
        return (await get(client, "greeter"))["rollout"]["state"]

    await until(lambda: _is(state(), "passed"), 60, "the probation passes")
    rollout = (await get(client, "greeter"))["rollout"]
    assert rollout["good_runs"] >= 3 and rollout["faults"] == 0
    assert not node_events(app, "agent.rolled_back")

    # an operator's stop during a probation ends the watch (the operator decides now)
    with_window = {**body, "component": "registry:greeter@1.0.2", "tick_interval_ms": 60_000}
    assert (await put(client, "greeter", with_window)).status == 200
    assert await state() == "probation"
    assert (await post(client, "greeter", "stop")).status == 200
    rollout = (await get(client, "greeter"))["rollout"]
    assert rollout["state"] == "ended" and "stop" in rollout["reason"]
    assert not node_events(app, "agent.rolled_back")


async def _is(value, expected) -> bool:
    return await value == expected


def test_the_probation_keys_are_checked(tmp_path):
    from node.config.model import ConfigError

    path = write_config(tmp_path)
    path.write_text(path.read_text().replace("[node]\n", "[node]\nprobation_ticks = 0\n", 1))
    with pytest.raises(ConfigError, match="probation_ticks"):
        load_config(path)
