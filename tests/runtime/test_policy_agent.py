"""A real agent (the cashier, compiled from agents/) whose `spend` the policy set decides:
a permit pays at once, a forbid reaches the agent as its denial with the policy's reason, a
large payment waits for two people, one of them from finance; over A2A and AG-UI a request a
policy decided is no input-required and no interrupt."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest
from a2a.helpers.proto_helpers import new_text_message
from a2a.types.a2a_pb2 import Role, SendMessageRequest, TaskState

from node.services.approvals import APPROVALS
from tests.policy_support import AUDITOR_TOKEN, FINANCE_TOKEN, POLICY_TOML, write_policy
from tests.polling import until
from tests.protocol_support import agent_toml, start_node, started
from tests.protocols.test_protocol_a2a import collect, kind, sdk_client, user_data
from tests.protocols.test_protocol_agui import finished, run, run_input, types
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
    (asked,) = node.app[APPROVALS].projection.list()
    # an answer that decides nothing is the client's error, saying which approval and why
    refusals = {
        OPERATE_TOKEN: (409, "operator approved"),  # the same token counts once
        AUDITOR_TOKEN: (403, "in none of the groups still missing"),  # no finance seat
    }
    for token, (status, why) in refusals.items():
        error = await a2a_error(node, task.id, "approve", token)
        assert error["code"] == -32004, error
        assert asked.id in error["message"] and why in error["message"], error
        info = error["data"][0]
        assert info["reason"] == "APPROVAL_REFUSED", info
        assert info["metadata"] == {"taskId": task.id, "approvals": asked.id, "status": str(status)}
    assert len(node.journal("cashier", "approval.endorsed")) == 1
    async with httpx.AsyncClient(headers=auth(FINANCE_TOKEN), timeout=30) as finance_http:
        finance = await sdk_client(finance_http, f"{node.url}/a2a/cashier", streaming=False)
        (second,) = await collect(finance.send_message(answer))
        await finance.close()
    assert second.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert output_of(node, task.id)["paid"] is True
    decided = node.journal("cashier", "approval.decided")[-1]
    assert decided["decision"] == "approve" and decided["operator"] == "finance"
    await client.close()


async def test_a_streaming_sdk_approver_of_one_seat_of_two_gets_input_required_at_once(node, http):
    """The a2a-sdk streams when the card says `streaming: true`: an "approve" that counts one
    seat of two answers with the task, still input-required, and the stream ends there (as a
    blocking answer does) instead of staying open until someone else decides."""
    client = await sdk_client(http, f"{node.url}/a2a/cashier")  # streaming, as the card says
    waiting = await collect(client.send_message(user_data({"pay": {"amount": 1500}})))
    task_id = next(e.task.id for e in waiting if kind(e) == "task")
    assert node.app[APPROVALS].projection.list()  # the request waits for two people
    answer = SendMessageRequest(
        message=new_text_message("approve", role=Role.ROLE_USER, task_id=task_id)
    )
    started_at = asyncio.get_running_loop().time()
    events = await asyncio.wait_for(collect(client.send_message(answer)), 10)
    assert asyncio.get_running_loop().time() - started_at < 5
    (only,) = events
    assert only.task.id == task_id
    assert only.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert len(node.journal("cashier", "approval.endorsed")) == 1
    await client.close()


async def a2a_error(node, task_id: str, text: str, token: str) -> dict:
    """The JSON-RPC error a blocking SendMessage answering `task_id` with `text` gets."""
    message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "taskId": task_id}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage"}
    body["params"] = {"message": {**message, "parts": [{"text": text}]}}
    async with httpx.AsyncClient(headers=auth(token), timeout=30) as http:
        answer = await http.post(f"{node.url}/a2a/cashier", json=body)
    assert answer.status_code == 200, answer.text
    assert "result" not in answer.json(), answer.text
    return answer.json()["error"]


async def test_over_ag_ui_a_resume_that_decides_nothing_ends_the_run_with_why(node, http):
    """A resume whose every decision is refused (the token approved already, or fills no seat
    still open) ends with RUN_ERROR APPROVAL_REFUSED, not a run that follows a task still
    waiting; a finance token's resume completes the request."""
    thread = str(uuid.uuid4())
    events = await run(node, "cashier", run_input(thread, '{"pay": {"amount": 1500}}'))
    (interrupt,) = finished(events)["outcome"]["interrupts"]
    url = f"{node.url}/api/v1/approvals/{interrupt['id']}"
    counted = await http.post(url, json={"decision": "approve"})  # the operator's seat
    assert counted.status_code == 200, counted.text

    resume = [{"interruptId": interrupt["id"], "status": "resolved"}]
    for token, why in ((OPERATE_TOKEN, "operator approved"), (AUDITOR_TOKEN, "in none of the")):
        refused = await run(node, "cashier", run_input(thread, resume=resume), token=token)
        assert types(refused) == ["RUN_STARTED", "CUSTOM", "RUN_ERROR"], refused
        assert refused[1]["value"]["code"] == "NOT_DECIDED"
        end = refused[-1]
        assert end["code"] == "APPROVAL_REFUSED", end
        assert interrupt["id"] in end["message"] and why in end["message"], end

    done = await run(node, "cashier", run_input(thread, resume=resume), token=FINANCE_TOKEN)
    assert finished(done)["result"]["paid"] is True
    decided = node.journal("cashier", "approval.decided")[-1]
    assert decided["decision"] == "approve" and decided["operator"] == "finance"
