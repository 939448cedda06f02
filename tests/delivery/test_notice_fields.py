"""What a notice tells the people who decide (node/delivery/channels.py), checked on webhooks
verified with the `standardwebhooks` package: the policy's reason, who must approve and how
far it is, who asked (the task's caller); channels filtered by approver group; follow-up
notices once a request is decided or expires, for the channels that ask for them."""

from __future__ import annotations

import base64

import httpx
import pytest
from standardwebhooks.webhooks import Webhook

from tests.delivery.support import DELIVERY_TOML, rpc, send_params, start_receiver
from tests.policy_support import FINANCE_TOKEN, POLICY_TOML, write_policy
from tests.polling import until
from tests.protocol_support import agent_toml, start_node, started
from tests.support import OPERATE_TOKEN, READ_TOKEN, auth

SECRET = "whsec_" + base64.b64encode(b"n" * 32).decode()
POLICY = """
@id("large")
@approvers("1, 1 from finance")
@reason("payments above 1000 need finance")
permit (principal, action == Action::"spend", resource)
when { context.request has amount && context.request.amount.greaterThan(decimal("1000.0")) };
"""
REQUESTS = """
[policy.requests.spend]
amount = "decimal?"
"""
CASHIER = """[agents.capabilities]
spend = true
[agents.approval]
spend = "policy"
timeout_secs = 4
"""


def channel(name: str, url: str, extra: str) -> str:
    return f"""
[[notifications.channels]]
name = "{name}"
kind = "webhook"
url = "{url}/{name}"
secret = "{SECRET}"
{extra}
"""


@pytest.fixture
async def receiver(aiohttp_server):
    return await start_receiver(aiohttp_server)


@pytest.fixture
async def node(aiohttp_server, tmp_path, built_agents, receiver):
    write_policy(tmp_path, POLICY)
    policy = POLICY_TOML[: POLICY_TOML.index("[policy.requests.spend]")] + REQUESTS
    events = 'on = ["requested", "decided", "expired", "abandoned"]'
    toml = (
        agent_toml("cashier", built_agents["cashier"], CASHIER)
        + policy
        + DELIVERY_TOML
        + "\n[notifications]\nescalate_before_secs = 1\n"
        + channel("finance", receiver.url, f'groups = ["finance"]\n{events}')
        + channel("legal", receiver.url, f'groups = ["legal"]\n{events}')
        + channel("everyone", receiver.url, 'on = ["requested"]')
    )
    node = await start_node(aiohttp_server, tmp_path, toml)
    await started(node, "cashier")
    return node


def verified(received) -> dict:
    return Webhook(SECRET).verify(received.body, received.headers)


async def pay(http, node, amount: int) -> str:
    params = send_params({"pay": {"amount": amount}}, returnImmediately=True)
    answer = await rpc(http, node.url, "cashier", "SendMessage", params, OPERATE_TOKEN)
    return answer["result"]["task"]["id"]


async def test_notices_say_why_who_must_approve_who_asked_and_how_it_ended(node, receiver):
    async with httpx.AsyncClient(timeout=30) as http:
        await pay(http, node, 1500)
        await receiver.wait_for(1, "/finance")
        requested = verified(receiver.at("/finance")[0])
        assert requested["type"] == "approval.requested"
        data = requested["data"]
        assert data["reason"] == "payments above 1000 need finance"
        assert data["approvers"] == "1, 1 from finance"
        assert data["progress"] == "0 of 2, waiting for finance, 1 more approver"
        assert data["caller"] == "operator"
        assert data["outcome"] is None
        approval_id = data["id"]
        for token in (OPERATE_TOKEN, FINANCE_TOKEN):
            answer = await http.post(
                f"{node.url}/api/v1/approvals/{approval_id}",
                json={"decision": "approve"},
                headers=auth(token),
            )
            assert answer.status_code == 200, answer.text
        await receiver.wait_for(2, "/finance")
        decided = verified(receiver.at("/finance")[1])
        assert decided["type"] == "approval.decided"
        assert decided["data"]["id"] == approval_id
        assert (decided["data"]["outcome"], decided["data"]["decided_by"]) == (
            "approve",
            "finance",
        )

        await pay(http, node, 2000)  # nobody decides: it expires (timeout_secs = 4)
        await receiver.wait_for(4, "/finance", timeout=20)
        kinds = [verified(r)["type"] for r in receiver.at("/finance")]
        assert kinds == [
            "approval.requested",
            "approval.decided",
            "approval.requested",
            "approval.expired",
        ]
        expired = verified(receiver.at("/finance")[3])["data"]
        assert expired["outcome"] == "timeout"

        # the channel without follow-ups heard of the two requests only; legal of nothing
        await until(lambda: len(receiver.at("/everyone")) == 2, 10, "both announced")
        assert [verified(r)["type"] for r in receiver.at("/everyone")] == ["approval.requested"] * 2
        assert receiver.at("/legal") == []
        listed = await http.get(f"{node.url}/api/v1/approvals", headers=auth(READ_TOKEN))
        assert listed.json() == []
