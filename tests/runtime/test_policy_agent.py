"""A real agent (the cashier, compiled from agents/) whose `spend` the policy set decides:
a permit pays at once, a forbid reaches the agent as its denial with the policy's reason, a
large payment waits for two people, one of them from finance; over A2A and AG-UI a request a
policy decided is no input-required and no interrupt."""

from __future__ import annotations

import uuid

import httpx
import pytest
from a2a.helpers.proto_helpers import new_text_message
from a2a.types.a2a_pb2 import Role, SendMessageRequest, TaskState

from node.services.approvals import APPROVALS
from tests.policy_support import FINANCE_TOKEN, POLICY_TOML, write_policy
from tests.polling import until
from tests.protocol_support import agent_toml, start_node, started
from tests.protocols.test_protocol_a2a import collect, kind, sdk_client, user_data
from tests.protocols.test_protocol_agui import finished, run, run_input
from tests.support import OPERATE_TOKEN, auth

# the cashier asks `spend` with what a task's `pay` holds, or {"invoice": ...} for a text
# "pay <invoice>" (AG-UI): every field may be absent
POLICY = """
@id("small-payments")
permit (principal, action == Action::"spend", resource)
when {
  context.request has amount && context.request has payee &&
  context.request.amount.lessThanOrEqual(decimal("10.0")) && context.request.payee == "acme"
};

@id("two-approvers")
@approvers("1, 1 from finance")
permit (principal, action == Action::"spend", resource)
when { context.request has amount && context.request.amount.greaterThan(decimal("1000.0")) };

@id("blocked-payee")
@reason("mallory is on the blocked list")
forbid (principal, action == Action::"spend", resource)
when { context.request has payee && context.request.payee == "mallory" };

@id("automatic-invoices")
permit (principal, action == Action::"spend", resource)
when { context.request has invoice && context.request.invoice like "AUTO-*" };
"""
REQUESTS = """
[policy.requests.spend]
amount = "decimal?"
payee = "String?"
invoice = "String?"
"""
POLICY_CASHIER = """[agents.capabilities]
spend = true
[agents.approval]
spend = "policy"
timeout_secs = 300
"""


@pytest.fixture
async def node(aiohttp_server, tmp_path, built_agents):
    write_policy(tmp_path, POLICY)
    toml = POLICY_TOML[: POLICY_TOML.index("[policy.requests.spend]")] + REQUESTS
    toml = agent_toml("cashier", built_agents["cashier"], POLICY_CASHIER) + toml
    # the same agent with `spend = true`: people decide, always, whatever the policies say
    toml += agent_toml(
        "strict", built_agents["cashier"], POLICY_CASHIER.replace('"policy"', "true")
    )
    node = await start_node(aiohttp_server, tmp_path, toml)
    await started(node, "cashier", "strict")
    return node


@pytest.fixture
async def http():
    async with httpx.AsyncClient(headers=auth(OPERATE_TOKEN), timeout=30) as client:
        yield client


async def pay(node, http, payment: dict, to: str = "cashier") -> str:
    body = {"from": "operator", "to": to, "input": {"pay": payment}}
    response = await http.post(f"{node.url}/api/v1/a2a/tasks", json=body)
    assert response.status_code in (200, 201), response.text
    return response.json()["id"]


def output_of(node, task_id):
    done = [e for e in node.journal("cashier", "task.completed") if e["id"] == task_id]
    return done[0]["output"] if done else None


async def test_the_policy_decides_a_real_agents_payments(node, http):
    small = await pay(node, http, {"amount": 4, "payee": "acme", "invoice": "INV-1"})
    paid = await until(lambda: output_of(node, small), 20, "the small payment is made")
    assert paid["paid"] is True
    blocked = await pay(node, http, {"amount": 4, "payee": "mallory"})
    refused = await until(lambda: output_of(node, blocked), 20, "the agent is told")
    assert refused == {
        "paid": False,
        "reason": "operator 'policy:blocked-payee' denied spend: mallory is on the blocked list",
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
        assert answer.status_code == 200, answer.text
    paid = await until(lambda: output_of(node, large), 20, "two people approved it")
    assert paid["paid"] is True

    # `true` keeps its meaning: the payment the policy permits above waits for a person
    await pay(node, http, {"amount": 4, "payee": "acme"}, to="strict")
    (strict,) = await until(gate.projection.list, 20, "the strict agent's payment waits")
    assert strict.agent == "strict" and not strict.policy


async def test_over_a2a_and_ag_ui_a_policy_decision_asks_for_no_input(node, http):
    client = await sdk_client(http, f"{node.url}/a2a/cashier")
    events = await collect(client.send_message(user_data({"pay": {"amount": 2, "payee": "acme"}})))
    states = [e.status_update.status.state for e in events if kind(e) == "status_update"]
    assert TaskState.TASK_STATE_INPUT_REQUIRED not in states
    assert states[-1] == TaskState.TASK_STATE_COMPLETED
    await client.close()

    events = await run(node, "cashier", run_input(str(uuid.uuid4()), "pay AUTO-7"))
    assert finished(events)["outcome"] == {"type": "success"}  # not interrupted
    assert node.journal("cashier", "approval.decided")[-1]["operator"] == (
        "policy:automatic-invoices"
    )


async def test_over_a2a_two_approvers_one_from_finance_fill_the_request(node, http):
    """The finance seat of an N-of-M request is filled by a finance token's A2A answer, as by
    its REST one: the token's groups go with its decision, whatever the protocol."""
    client = await sdk_client(http, f"{node.url}/a2a/cashier", streaming=False)
    waiting = await collect(client.send_message(user_data({"pay": {"amount": 1500}})))
    task = waiting[0].task
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    answer = SendMessageRequest(
        message=new_text_message("approve", role=Role.ROLE_USER, task_id=task.id)
    )
    (first,) = await collect(client.send_message(answer))  # the operator's: one seat of two
    assert first.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    async with httpx.AsyncClient(headers=auth(FINANCE_TOKEN), timeout=30) as finance_http:
        finance = await sdk_client(finance_http, f"{node.url}/a2a/cashier", streaming=False)
        (second,) = await collect(finance.send_message(answer))
        await finance.close()
    assert second.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert output_of(node, task.id)["paid"] is True
    decided = node.journal("cashier", "approval.decided")[-1]
    assert decided["decision"] == "approve" and decided["operator"] == "finance"
    await client.close()
