"""Deny with a reason: validated, journaled, given to the waiting agent, kept in the history
with what was asked and who decided (issue 29 item 6)."""

from __future__ import annotations

import asyncio

import pytest

from node.runtime.host import denial_message
from tests.api.test_approvals import ask, events_of, gate_of
from tests.polling import until
from tests.support import OPERATE_TOKEN, READ_TOKEN, auth


async def history(client) -> list[dict]:
    response = await client.get("/api/v1/approvals/history", headers=auth(READ_TOKEN))
    assert response.status == 200
    return await response.json()


async def test_a_denial_reason_reaches_the_agent_the_journal_and_the_history(client):
    waiting = asyncio.ensure_future(gate_of(client).ask("payer", "spend", "pay 10 EUR", 60))
    pending = await _one_pending(client)
    response = await client.post(
        f"/api/v1/approvals/{pending}",
        json={"decision": "deny", "reason": "over this week's budget"},
        headers=auth(OPERATE_TOKEN),
    )
    assert response.status == 200
    body = await response.json()
    assert body["reason"] == "over this week's budget" and body["operator"] == "operator"

    verdict = await asyncio.wait_for(waiting, 5)
    assert verdict == ("deny", "operator", "over this week's budget")
    assert denial_message("spend", verdict) == (
        "operator 'operator' denied spend: over this week's budget"
    )
    decided = [d for t, d in events_of(client, "payer") if t == "approval.decided"]
    assert decided[0]["reason"] == "over this week's budget"

    [entry] = await history(client)
    assert entry == {
        "id": pending,
        "agent": "payer",
        "outcome": "deny",
        "at": entry["at"],
        "operator": "operator",
        "reason": "over this week's budget",
        "capability": "spend",
        "detail": "spend: pay 10 EUR",
    }


async def test_the_history_says_what_was_approved_and_by_whom(client):
    task, approval_id = await ask(client, capability="email", detail="to: ceo@example.com")
    await client.post(
        f"/api/v1/approvals/{approval_id}",
        json={"decision": "approve"},
        headers=auth(OPERATE_TOKEN),
    )
    assert await task == "approve"
    [entry] = await history(client)
    assert (entry["outcome"], entry["operator"], entry["capability"]) == (
        "approve",
        "operator",
        "email",
    )
    assert entry["detail"] == "email: to: ceo@example.com" and entry["reason"] is None


async def test_a_batch_denial_carries_its_reason_to_every_request(client):
    asked = [await ask(client, detail=f"pay {i}") for i in range(2)]
    response = await client.post(
        "/api/v1/approvals/batch",
        json={"ids": [i for _, i in asked], "decision": "deny", "reason": "duplicate invoices"},
        headers=auth(OPERATE_TOKEN),
    )
    assert (await response.json())["decided"] == 2
    assert [await task for task, _ in asked] == ["deny", "deny"]
    assert [e["reason"] for e in await history(client)] == ["duplicate invoices"] * 2


BAD_REASONS = [
    ({"decision": "approve", "reason": "fine"}, "only with decision deny"),
    ({"decision": "deny", "reason": ""}, "reason"),
    ({"decision": "deny", "reason": "   "}, "reason"),
    ({"decision": "deny", "reason": "two\nlines"}, "reason"),
    ({"decision": "deny", "reason": "a trailing newline\n"}, "reason"),
    ({"decision": "deny", "reason": "a tab\there"}, "reason"),
    # what would show as something else: "\u202eevorppa" reads "approve"; a C1 CSI; invisible
    ({"decision": "deny", "reason": "\u202eevorppa"}, "it holds \\u202e"),
    ({"decision": "deny", "reason": "ok \x9b2J"}, "it holds \\x9b"),
    ({"decision": "deny", "reason": "zero\u200bwidth"}, "it holds \\u200b"),
    ({"decision": "deny", "reason": "\u2066isolate\u2069"}, "no control, bidi"),
    ({"decision": "deny", "reason": "x" * 501}, "reason"),
    ({"decision": "deny", "reason": 5}, "reason"),
]


@pytest.mark.parametrize(("body", "mentions"), BAD_REASONS)
async def test_a_bad_reason_is_400_and_decides_nothing(client, body, mentions):
    task, approval_id = await ask(client)
    for path, payload in (
        (f"/api/v1/approvals/{approval_id}", body),
        ("/api/v1/approvals/batch", {**body, "ids": [approval_id]}),
    ):
        response = await client.post(path, json=payload, headers=auth(OPERATE_TOKEN))
        assert response.status == 400
        assert response.content_type == "application/problem+json"
        assert mentions in (await response.json())["detail"]
    assert gate_of(client).projection.is_pending(approval_id) and not task.done()
    task.cancel()


async def _one_pending(client) -> str:
    async def listed() -> list[dict]:
        return await (await client.get("/api/v1/approvals", headers=auth(READ_TOKEN))).json()

    return (await until(listed, what="the request is pending"))[0]["id"]


async def test_a_padded_request_is_summarised_amount_first(client):
    """An agent cannot pad the amount out of the one-line `detail` operators read."""
    import json

    request = json.dumps({"memo": "pad " * 2000, "amount": 90000, "to": "DE89"})
    waiting = asyncio.ensure_future(gate_of(client).ask("payer", "spend", request, 60))
    pending = await _one_pending(client)
    listed = await client.get("/api/v1/approvals", headers=auth(READ_TOKEN))
    [entry] = [p for p in await listed.json() if p["id"] == pending]
    assert entry["detail"].startswith('spend: amount=90000, to="DE89", memo="pad pad')
    assert entry["detail"].endswith('pad "') and "…" in entry["detail"]
    assert len(entry["detail"]) < 200 and entry["request"] == request  # the whole is there
    waiting.cancel()
