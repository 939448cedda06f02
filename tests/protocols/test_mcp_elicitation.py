"""Approvals as MCP elicitation, through the official `mcp` SDK client: the cashier's `pay`
tool waits on the approval gate inside `tools/call`; a client that declared elicitation and
whose token may decide is asked, and its answer is journaled as the token's decision (approve,
decline); one whose token may not (the policy wants finance, the token is the auditor's) is not
asked, and the call waits until someone who may decides elsewhere; what the policy set permits
asks nobody."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import ElicitResult

from tests.policy_support import AUDITOR_TOKEN, FINANCE_TOKEN, POLICY_TOML, write_policy
from tests.polling import until
from tests.protocol_support import agent_toml, start_node, started
from tests.support import auth

POLICY = """
@id("small-payments")
permit (principal, action == Action::"spend", resource)
when { context.request.amount.lessThanOrEqual(decimal("10.0")) };

@id("finance-above-1000")
@approvers("1 from finance")
permit (principal, action == Action::"spend", resource)
when { context.request.amount.greaterThan(decimal("1000.0")) };
"""
CASHIER = """mcp = true
[agents.capabilities]
spend = true
[agents.approval]
spend = "policy"
timeout_secs = 300
"""


@pytest.fixture
async def node(aiohttp_server, tmp_path, built_agents):
    write_policy(tmp_path, POLICY)
    node = await start_node(
        aiohttp_server,
        tmp_path,
        agent_toml("cashier", built_agents["cashier"], CASHIER) + POLICY_TOML,
    )
    await started(node, "cashier")
    return node


class Asked:
    """An elicitation callback that answers `answer` and keeps what it was asked."""

    def __init__(self, answer: ElicitResult) -> None:
        self.answer = answer
        self.asked: list[Any] = []

    async def __call__(self, context: Any, params: Any) -> ElicitResult:
        self.asked.append(params)
        return self.answer


def connect(node, token: str, asked: Asked) -> Client:
    http = httpx2.AsyncClient(headers=auth(token), timeout=60)
    url = f"{node.url}/api/v1/mcp/cashier"
    transport = streamable_http_client(url, http_client=http)
    return Client(transport, mode="legacy", elicitation_callback=asked)


def decisions(node) -> list[tuple[str, str]]:
    return [(e["decision"], e["operator"]) for e in node.journal("cashier", "approval.decided")]


async def test_a_token_that_may_decide_is_asked_and_its_answer_is_journaled(node):
    approve = Asked(ElicitResult(action="accept", content={"decision": "approve"}))
    async with connect(node, FINANCE_TOKEN, approve) as client:
        paid = await client.call_tool("pay", {"amount": 5000, "payee": "globex"})
        assert not paid.is_error, paid.content[0].text
        assert json.loads(paid.content[0].text)["paid"] is True
        (asked,) = approve.asked
        assert "spend" in asked.message and "5000" in asked.message
        assert asked.requested_schema["properties"]["decision"]["enum"] == ["approve", "deny"]
        # the policy set rules first: what it permits asks nobody
        small = await client.call_tool("pay", {"amount": 5, "payee": "acme"})
        assert not small.is_error and len(approve.asked) == 1
    assert decisions(node)[0] == ("approve", "finance")

    decline = Asked(ElicitResult(action="decline"))
    async with connect(node, FINANCE_TOKEN, decline) as client:
        refused = await client.call_tool("pay", {"amount": 50, "payee": "globex"})
        assert refused.is_error and "declined through MCP elicitation" in refused.content[0].text
    assert len(decline.asked) == 1
    assert decisions(node)[-1] == ("deny", "finance")


async def test_a_token_that_may_not_decide_is_not_asked_and_the_call_waits(node):
    never = Asked(ElicitResult(action="accept", content={"decision": "approve"}))
    async with connect(node, AUDITOR_TOKEN, never) as client:
        call = asyncio.ensure_future(client.call_tool("pay", {"amount": 5000, "payee": "x"}))
        async with httpx.AsyncClient(headers=auth(FINANCE_TOKEN)) as http:

            async def pending() -> list[dict[str, Any]]:
                return (await http.get(f"{node.url}/api/v1/approvals")).json()

            (request,) = await until(pending)
            assert not call.done()
            decided = await http.post(
                f"{node.url}/api/v1/approvals/{request['id']}", json={"decision": "approve"}
            )
            assert decided.status_code == 200, decided.text
        paid = await asyncio.wait_for(call, 30)
        assert not paid.is_error
    assert never.asked == []  # the auditor is in no group the request still needs
    assert decisions(node) == [("approve", "finance")]
