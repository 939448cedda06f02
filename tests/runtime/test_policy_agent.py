"""A real agent (the cashier, compiled from agents/) whose `spend` the policy set decides:
a permit pays at once, a forbid reaches the agent as its denial with the policy's reason,
a large payment waits for two people, one of them from finance."""

from __future__ import annotations

import pytest

from node.services.approvals import APPROVALS
from tests.policy_support import FINANCE_TOKEN, POLICY_TOML, write_policy
from tests.polling import until
from tests.protocol_support import agent_toml, start_node, started
from tests.support import OPERATE_TOKEN, auth

POLICY_CASHIER = """[agents.capabilities]
spend = true
[agents.approval]
spend = "policy"
timeout_secs = 300
"""


@pytest.fixture
async def node(aiohttp_server, tmp_path, built_agents):
    write_policy(tmp_path)
    toml = agent_toml("cashier", built_agents["cashier"], POLICY_CASHIER) + POLICY_TOML
    node = await start_node(aiohttp_server, tmp_path, toml)
    await started(node, "cashier")
    return node


async def pay(node, http, payment: dict) -> str:
    response = await http.post(
        f"{node.url}/api/v1/a2a/tasks",
        json={"from": "operator", "to": "cashier", "input": {"pay": payment}},
        headers=auth(OPERATE_TOKEN),
    )
    assert response.status in (200, 201), await response.text()
    return (await response.json())["id"]


def output_of(node, task_id):
    done = [e for e in node.journal("cashier", "task.completed") if e["id"] == task_id]
    return done[0]["output"] if done else None


async def test_the_policy_decides_a_real_agents_payments(node):
    import aiohttp

    async with aiohttp.ClientSession() as http:
        small = await pay(node, http, {"amount": 4, "payee": "acme", "invoice": "INV-1"})
        paid = await until(lambda: output_of(node, small), 20, "the small payment is made")
        assert paid["paid"] is True
        blocked = await pay(node, http, {"amount": 4, "payee": "mallory"})
        refused = await until(lambda: output_of(node, blocked), 20, "the agent is told")
        assert refused == {
            "paid": False,
            "reason": "operator 'policy:blocked-payee' denied spend: "
            "mallory is on the blocked list",
        }
        decided = node.journal("cashier", "approval.decided")
        assert [d["operator"] for d in decided] == ["policy:small-payments", "policy:blocked-payee"]

        large = await pay(node, http, {"amount": 1500, "payee": "acme"})
        gate = node.app[APPROVALS]
        (asked,) = await until(gate.projection.list, 20, "the large payment waits for people")
        assert asked.task == large
        url = f"{node.url}/api/v1/approvals/{asked.id}"
        for token in (OPERATE_TOKEN, FINANCE_TOKEN):
            answer = await http.post(url, json={"decision": "approve"}, headers=auth(token))
            assert answer.status == 200, await answer.text()
        paid = await until(lambda: output_of(node, large), 20, "two people approved it")
        assert paid["paid"] is True
