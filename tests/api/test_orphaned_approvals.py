"""Requests left by an agent instance that ended: shown as orphaned, a decision on one is
recorded for a later identical request (and survives restarts), and the node closes them with
`approval.abandoned` when they can never apply; a decision on a closed one is a 409."""

from __future__ import annotations

import asyncio

import pytest

from node.app import build_app
from node.context import CONTEXT
from node.services.approvals import APPROVALS
from node.services.tasks import TASKS
from tests.api.test_approvals_restart import hosting_payer, leave_pending, requested
from tests.polling import until
from tests.support import OPERATE_TOKEN, auth, outcome


@pytest.fixture
def config(tmp_path):
    return hosting_payer(tmp_path)


async def listed(client) -> list[dict]:
    response = await client.get("/api/v1/approvals", headers=auth())
    assert response.status == 200
    return await response.json()


async def decide(client, approval_id: str, decision: str = "approve"):
    return await client.post(
        f"/api/v1/approvals/{approval_id}", json={"decision": decision}, headers=auth(OPERATE_TOKEN)
    )


async def test_a_decision_on_an_orphan_is_recorded_and_survives_a_restart(aiohttp_client, config):
    approval_id = await leave_pending(aiohttp_client, config)
    client = await aiohttp_client(build_app(config))
    (item,) = await listed(client)
    assert (item["id"], item["state"]) == (approval_id, "orphaned")
    assert "asks for the same again" in item["note"]
    answer = await decide(client, approval_id)
    assert answer.status == 200
    body = await answer.json()
    assert body["applies"] == "later" and "asks for the same again" in body["effect"]
    (item,) = await listed(client)  # still pending: nothing was performed
    assert (item["state"], item["recorded"], item["recorded_by"]) == (
        "orphaned",
        "approve",
        "operator",
    )
    await client.close()

    again = await aiohttp_client(build_app(config))  # the recorded decision is in the journal
    ctx, gate = again.app[CONTEXT], again.app[APPROVALS]
    assert await asyncio.wait_for(outcome(gate.ask("payer", "spend", "INV-1", 60)), 5) == "approve"
    assert requested(ctx) == [approval_id]  # no second request: the recorded one applied
    resolution = gate.projection.resolution(approval_id)
    assert resolution is not None and (resolution.outcome, resolution.operator) == (
        "approve",
        "operator",
    )
    # used once: the next identical request asks the operator again
    waiting = asyncio.create_task(outcome(gate.ask("payer", "spend", "INV-1", 60)))
    await until(lambda: len(requested(ctx)) == 2, what="a new request is journaled")
    (item,) = await listed(again)
    assert item["state"] == "pending"  # a running call waits for this one
    waiting.cancel()


async def test_a_decision_with_a_waiting_call_applies_now(aiohttp_client, config):
    client = await aiohttp_client(build_app(config))
    gate = client.app[APPROVALS]
    waiting = asyncio.create_task(outcome(gate.ask("payer", "spend", "INV-9", 60)))
    await until(lambda: gate.projection.count, what="the request is pending")
    (item,) = await listed(client)
    assert item["state"] == "pending" and item["note"] is None
    body = await (await decide(client, item["id"], "deny")).json()
    assert body["applies"] == "now"
    assert await asyncio.wait_for(waiting, 5) == "deny"


async def test_asking_for_something_else_in_the_same_place_abandons_the_orphan(
    aiohttp_client, config
):
    approval_id = await leave_pending(aiohttp_client, config)  # asked by a tick
    client = await aiohttp_client(build_app(config))
    gate = client.app[APPROVALS]
    asking = asyncio.create_task(outcome(gate.ask("payer", "spend", "INV-2", 60)))
    await until(lambda: gate.projection.resolution(approval_id), what="the orphan is closed")
    resolution = gate.projection.resolution(approval_id)
    assert resolution is not None and resolution.outcome == "abandoned"
    assert "something else in a tick" in (resolution.reason or "")
    answer = await decide(client, approval_id)
    assert answer.status == 409
    problem = await answer.json()
    assert "abandoned" in problem["detail"] and "INV-2" in problem["detail"]
    await until(lambda: gate.projection.count == 1, what="the new request is pending")
    (item,) = await listed(client)  # only the new request is left
    assert item["id"] != approval_id and item["state"] == "pending"
    asking.cancel()


async def test_the_end_of_its_task_abandons_what_the_task_asked(aiohttp_client, config):
    client = await aiohttp_client(build_app(config))
    tasks, gate = client.app[TASKS], client.app[APPROVALS]
    created = await tasks.create("boss", "payer", {"n": 1})
    await tasks.start(created["id"])
    waiting = asyncio.create_task(
        outcome(gate.ask("payer", "spend", "INV-3", 60, task_id=created["id"]))
    )
    await until(lambda: gate.projection.count, what="the task's request is pending")
    (approval_id,) = [r.id for r in gate.projection.list()]
    waiting.cancel()  # its call ends (as when the instance dies): the request is orphaned
    await until(lambda: gate.is_orphaned(gate.projection.list()[0]), what="orphaned")
    await tasks.complete(created["id"], {"ok": True})
    await until(lambda: gate.projection.resolution(approval_id), what="the request is closed")
    resolution = gate.projection.resolution(approval_id)
    assert resolution is not None and resolution.outcome == "abandoned"
    assert resolution.reason == f"task {created['id']} ended (completed)"
    assert (await decide(client, approval_id)).status == 409


async def test_stopping_an_agent_abandons_its_requests(aiohttp_client, config):
    approval_id = await leave_pending(aiohttp_client, config)
    client = await aiohttp_client(build_app(config))
    gate = client.app[APPROVALS]
    assert await gate.abandon_agent("payer", "payer was stopped") == [approval_id]
    answer = await decide(client, approval_id, "deny")
    assert answer.status == 409 and "payer was stopped" in (await answer.json())["detail"]
    history = await client.get("/api/v1/approvals/history", headers=auth())
    assert any(h["id"] == approval_id for h in await history.json())
