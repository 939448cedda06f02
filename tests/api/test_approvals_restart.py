"""After a restart the agent asks again for what it asked before: it gets the operator's
decision on the request listed before the restart, whether it comes before or after it asks."""

import asyncio
import contextlib

import pytest

from node.app import build_app
from node.context import CONTEXT
from node.services.approvals import APPROVALS, GateClosedError
from projections.approvals import Approvals
from tests.polling import until
from tests.support import OPERATE_TOKEN, auth, make_config, outcome, tiny_component


def hosting_payer(tmp_path):
    """A node hosting `payer` (a tiny component): only an agent hosted here can ask again."""
    tiny_component(tmp_path / "agent.wasm")
    return make_config(tmp_path, '[[agents]]\nname = "payer"\ncomponent = "agent.wasm"\n')


@pytest.fixture
def config(tmp_path):
    return hosting_payer(tmp_path)


def requested(ctx) -> list[str]:
    return [
        e.event.data["id"]
        for e in ctx.store.read_stream("payer", 0, 1000)
        if e.event.type == "approval.requested"
    ]


async def leave_pending(aiohttp_client, config) -> str:
    client = await aiohttp_client(build_app(config))
    gate = client.app[APPROVALS]
    waiting = asyncio.create_task(outcome(gate.ask("payer", "spend", "INV-1", 60)))
    await until(lambda: gate.projection.count, what="the request is pending")
    (approval_id,) = [r.id for r in gate.projection.list()]
    await client.close()  # the node stops; its agent instance is gone, the request stays
    with contextlib.suppress(GateClosedError):
        await waiting
    return approval_id


async def test_a_decision_before_the_agent_asks_again_is_not_lost(aiohttp_client, config):
    approval_id = await leave_pending(aiohttp_client, config)
    client = await aiohttp_client(build_app(config))
    ctx = client.app[CONTEXT]
    gate = client.app[APPROVALS]
    decided = await client.post(
        f"/api/v1/approvals/{approval_id}",
        json={"decision": "approve"},
        headers=auth(OPERATE_TOKEN),
    )
    assert decided.status == 200
    assert await outcome(gate.ask("payer", "spend", "INV-1", 60)) == "approve"
    assert requested(ctx) == [approval_id]  # no second request was journaled
    # the decision answers one request only: the next one waits for a new decision
    again = asyncio.create_task(outcome(gate.ask("payer", "spend", "INV-1", 60)))
    await until(lambda: len(requested(ctx)) >= 2, what="a second request is journaled")
    again.cancel()


async def test_a_request_after_the_restart_adopts_the_pending_one(aiohttp_client, config):
    approval_id = await leave_pending(aiohttp_client, config)
    client = await aiohttp_client(build_app(config))
    ctx = client.app[CONTEXT]
    asking = asyncio.create_task(outcome(client.app[APPROVALS].ask("payer", "spend", "INV-1", 60)))
    await asyncio.sleep(0.05)
    assert requested(ctx) == [approval_id]
    decided = await client.post(
        f"/api/v1/approvals/{approval_id}", json={"decision": "deny"}, headers=auth(OPERATE_TOKEN)
    )
    assert decided.status == 200
    assert await asyncio.wait_for(asking, 5) == "deny"


async def test_a_request_while_the_decision_is_being_journaled_waits_for_it(aiohttp_client, config):
    approval_id = await leave_pending(aiohttp_client, config)
    client = await aiohttp_client(build_app(config))
    ctx = client.app[CONTEXT]
    gate = client.app[APPROVALS]
    deciding = asyncio.create_task(gate.decide(approval_id, "approve", "ops"))
    await asyncio.sleep(0)  # the decision is claimed and on its way to the journal
    assert not deciding.done()
    assert await asyncio.wait_for(outcome(gate.ask("payer", "spend", "INV-1", 60)), 5) == "approve"
    await deciding
    assert requested(ctx) == [approval_id]  # no second request was journaled


async def test_a_different_request_with_the_same_start_is_not_adopted(aiohttp_client, config):
    """Adoption matches the whole request by its hash, not a summary cut at 1,000 chars."""
    client = await aiohttp_client(build_app(config))
    gate = client.app[APPROVALS]
    padding = "x" * 2000
    waiting = asyncio.create_task(outcome(gate.ask("payer", "spend", f"{padding} pay 1 EUR", 60)))
    await until(lambda: gate.projection.count, what="the request is pending")
    (approval_id,) = [r.id for r in gate.projection.list()]
    await client.close()
    with contextlib.suppress(GateClosedError):
        await waiting

    client = await aiohttp_client(build_app(config))
    ctx = client.app[CONTEXT]
    decided = await client.post(
        f"/api/v1/approvals/{approval_id}",
        json={"decision": "approve"},
        headers=auth(OPERATE_TOKEN),
    )
    assert decided.status == 200
    asking = asyncio.create_task(
        outcome(client.app[APPROVALS].ask("payer", "spend", f"{padding} pay 9999 EUR", 60))
    )
    # a new request of its own, not the approved one
    await until(lambda: len(requested(ctx)) >= 2, what="a second request is journaled")
    assert not asking.done()
    (new,) = ctx.projections.get(Approvals).list()
    assert new.request.endswith("pay 9999 EUR") and new.id != approval_id
    asking.cancel()
