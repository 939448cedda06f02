"""Policies at the gate, over HTTP: permit, forbid and ask on the request's fields, each
automatic decision journaled with its request in one write and naming its policy set; budgets
under 64 concurrent requests; N-of-M approvers with token groups; SIGHUP's new set."""

from __future__ import annotations

import asyncio
import json

import pytest

from node.config.reload import Reloader
from node.context import CONTEXT
from node.services.approvals import APPROVALS
from projections.approvals import Approvals
from tests.policy_support import (
    AUDITOR_TOKEN,
    FINANCE_TOKEN,
    POLICY_TOML,
    payment,
    write_policy,
)
from tests.polling import until
from tests.support import (
    ADMIN_TOKEN,
    OPERATE_TOKEN,
    READ_TOKEN,
    auth,
    make_config,
    replicate,
    write_config,
)


@pytest.fixture
def config(tmp_path):
    write_policy(tmp_path)
    return make_config(tmp_path, POLICY_TOML)


def gate_of(client):
    return client.app[APPROVALS]


def journal(client, stream="payer"):
    return client.app[CONTEXT].store.read_stream(stream, 0, 10_000)


def events(client, kind, stream="payer"):
    return [e.event.data for e in journal(client, stream) if e.event.type == kind]


def ask(client, request, agent="payer", task=None):
    return gate_of(client).ask(agent, "spend", request, None, task, policy=True)


async def pending_one(client, asking):
    """Start `asking`; the request it leaves pending (it asks people)."""
    gate = gate_of(client)
    before = {r.id for r in gate.projection.list()}
    task = asyncio.create_task(asking)
    new = await until(
        lambda: {r.id for r in gate.projection.list()} - before, what="the request is pending"
    )
    (approval_id,) = new
    return task, approval_id


async def test_a_policy_permits_and_forbids_in_the_requests_write_and_names_itself(client):
    digest = gate_of(client).policy.current.digest
    verdict = await ask(client, payment(3.5))
    assert verdict.outcome == "approve" and verdict.operator == "policy:small-payments"
    denied = await ask(client, payment(2, "mallory"))
    assert denied.outcome == "deny" and denied.operator == "policy:blocked-payee"
    assert denied.reason == "mallory is on the blocked list"
    assert gate_of(client).projection.list() == []  # never pending, not even for a moment
    envelopes = journal(client)
    assert [e.event.type for e in envelopes] == [
        "approval.requested",
        "approval.decided",
        "approval.requested",
        "approval.decided",
    ]
    for asked, decided in (envelopes[0:2], envelopes[2:4]):
        # one write: one commit's timestamp, adjacent positions, the decision on its hash
        assert asked.event.ts == decided.event.ts
        assert decided.position == asked.position + 1
        assert decided.event.data["request_hash"] == asked.event.data["request_hash"]
        assert decided.event.data["policy"]["set"] == digest
    permit = envelopes[1].event.data
    assert permit["policy"] == {"set": digest, "ids": ["small-payments"]}
    assert permit["charges"] == [
        {
            "budget": "small-payments",
            "field": "amount",
            "amount": "3.5",
            "total": "3.5",
            "limit": "100",
            "period_secs": 86400,
        }
    ]
    forbid = envelopes[3].event.data
    assert forbid["decision"] == "deny" and forbid["reason"] == "mallory is on the blocked list"
    history = await (await client.get("/api/v1/approvals/history", headers=auth(READ_TOKEN))).json()
    assert [(h["outcome"], h["operator"]) for h in history] == [
        ("deny", "policy:blocked-payee"),
        ("approve", "policy:small-payments"),
    ]
    assert history[0]["policy"]["ids"] == ["blocked-payee"]
    metrics = await (await client.get("/api/v1/metrics", headers=auth(READ_TOKEN))).text()
    for outcome, count in (("permit", 1), ("forbid", 1), ("ask", 0)):
        assert f'svc_policy_rulings_total{{outcome="{outcome}"}} {count}.0' in metrics


async def test_what_no_policy_decides_asks_people_saying_why(client):
    task, approval_id = await pending_one(client, ask(client, payment(50)))
    [listed] = await (await client.get("/api/v1/approvals", headers=auth(READ_TOKEN))).json()
    assert listed["id"] == approval_id and "approvals" not in listed
    assert listed["policy"]["reason"] == "no policy decides this spend request"
    response = await client.post(
        f"/api/v1/approvals/{approval_id}", json={"decision": "approve"}, headers=auth()
    )
    assert (await response.json())["applies"] == "now"
    assert (await task).operator == "admin"
    # a request whose fields do not fit what [policy.requests.spend] declares is not judged
    task, approval_id = await pending_one(client, ask(client, json.dumps({"amount": "ten"})))
    request = gate_of(client).projection.get(approval_id)
    assert request.policy.reason == (
        "the policies cannot judge this request: request.amount is not a number (declared decimal)"
    )
    task.cancel()


async def test_a_budget_holds_under_64_concurrent_requests(client):
    """100 a day in payments of 7: 14 go through, whichever arrive together, the rest ask."""
    gate = gate_of(client)
    asking = [asyncio.create_task(ask(client, payment(7, invoice=f"i-{n}"))) for n in range(64)]
    await until(
        lambda: sum(t.done() for t in asking) + gate.projection.count == 64,
        what="every request permitted or pending",
    )
    permitted = [t.result() for t in asking if t.done()]
    for waiting in asking:
        waiting.cancel()
    assert len(permitted) == 14
    assert all(v.operator == "policy:small-payments" for v in permitted)
    asked = gate.projection.list()
    assert len(asked) == 50
    assert all(
        r.policy.reason.startswith("over the budget of policy small-payments") for r in asked
    )
    totals = sorted(float(d["charges"][0]["total"]) for d in events(client, "approval.decided"))
    assert totals == [7.0 * n for n in range(1, 15)]
    approvals, store = client.app[CONTEXT].projections.get(Approvals), client.app[CONTEXT].store
    assert approvals.spent("payer", "spend", "small-payments", 0, store.last_position) == 98
    # charges past a position are not counted up to it: the gate counts those itself
    first_charge = next(e for e in journal(client) if e.event.data.get("charges")).position
    assert approvals.spent("payer", "spend", "small-payments", 0, first_charge) == 7
    # another agent has its own budget; 2 more fit under this one's limit
    assert (await ask(client, payment(7), agent="other")).outcome == "approve"
    assert (await ask(client, payment(2))).outcome == "approve"


async def test_two_approvers_one_from_finance_through_the_api(client):
    task, approval_id = await pending_one(client, ask(client, payment(2500, invoice="big")))
    url = f"/api/v1/approvals/{approval_id}"
    [listed] = await (await client.get("/api/v1/approvals", headers=auth(READ_TOKEN))).json()
    assert listed["approvers"] == [{"count": 1, "group": None}, {"count": 1, "group": "finance"}]
    assert listed["approvals"]["progress"] == "0 of 2, waiting for finance, 1 more approver"

    first = await client.post(url, json={"decision": "approve"}, headers=auth(OPERATE_TOKEN))
    assert first.status == 200
    body = await first.json()
    assert body["applies"] == "waiting"
    assert body["approvals"] == {
        "needed": 2,
        "approved_by": ["operator"],
        "waiting_for": ["finance"],
        "progress": "1 of 2, waiting for finance",
    }
    assert not task.done()
    again = await client.post(url, json={"decision": "approve"}, headers=auth(OPERATE_TOKEN))
    assert again.status == 409
    assert "a token counts once" in (await again.json())["detail"]
    outsider = await client.post(url, json={"decision": "approve"}, headers=auth(AUDITOR_TOKEN))
    assert outsider.status == 403
    assert "waiting for finance" in (await outsider.json())["detail"]
    [listed] = await (await client.get("/api/v1/approvals", headers=auth(READ_TOKEN))).json()
    assert listed["approvals"]["progress"] == "1 of 2, waiting for finance"
    assert [e["operator"] for e in listed["endorsements"]] == ["operator"]

    last = await client.post(url, json={"decision": "approve"}, headers=auth(FINANCE_TOKEN))
    assert (await last.json())["applies"] == "now"
    verdict = await asyncio.wait_for(task, 5)
    assert verdict.outcome == "approve" and verdict.operator == "finance"
    kinds = [e.event.type for e in journal(client)]
    assert kinds == [
        "approval.requested",
        "approval.endorsed",
        "approval.endorsed",
        "approval.decided",
    ]
    last_two = journal(client)[-2:]
    assert (
        last_two[0].event.ts == last_two[1].event.ts
    )  # the last approval and the decision: one write
    decided = last_two[1].event.data
    assert decided["approvers"] == ["operator", "finance"]
    assert events(client, "approval.endorsed")[1]["groups"] == ["finance"]


async def test_any_denial_decides_and_a_batch_counts_approvals(client):
    task, first = await pending_one(client, ask(client, payment(5000, invoice="a")))
    other_task, second = await pending_one(client, ask(client, payment(6000, invoice="b")))
    batch = await client.post(
        "/api/v1/approvals/batch",
        json={"ids": [first, second], "decision": "approve"},
        headers=auth(FINANCE_TOKEN),
    )
    assert await batch.json() == {
        "decided": 0,
        "ids": [],
        "skipped": [],
        "waiting": [first, second],
    }
    again = await client.post(
        "/api/v1/approvals/batch",
        json={"ids": [first], "decision": "approve"},
        headers=auth(FINANCE_TOKEN),
    )
    assert (await again.json())["skipped"] == [first]  # the same token counts once
    denied = await client.post(
        f"/api/v1/approvals/{first}",
        json={"decision": "deny", "reason": "not this quarter"},
        headers=auth(AUDITOR_TOKEN),
    )
    assert denied.status == 200
    assert (await asyncio.wait_for(task, 5)).outcome == "deny"
    done = await client.post(
        "/api/v1/approvals/batch",
        json={"ids": [second], "decision": "approve"},
        headers=auth(ADMIN_TOKEN),
    )
    assert (await done.json())["ids"] == [second]
    assert (await asyncio.wait_for(other_task, 5)).outcome == "approve"


async def test_sighup_puts_a_new_policy_set_in_force_and_journals_its_hash(client, tmp_path):
    gate = gate_of(client)
    before = gate.policy.current.digest
    write_policy(
        tmp_path,
        '@id("nothing-to-acme") @reason("acme is paused")\n'
        'forbid (principal, action == Action::"spend", resource)\n'
        'when { context.request.payee == "acme" };\n',
    )
    reloader = Reloader(client.app, tmp_path / "runtime.toml", None)
    assert await reloader.reload()
    after = gate.policy.current.digest
    assert after != before
    verdict = await ask(client, payment(3))
    assert verdict.outcome == "deny" and verdict.reason == "acme is paused"
    reloaded = [e.event.data for e in journal(client, "$node") if e.event.type == "node.reloaded"]
    assert reloaded[-1]["policy_set"] == after
    # a file that does not check keeps the running set
    write_policy(tmp_path, "permit (principal, action, resource);\n")  # no @id
    assert not await reloader.reload()
    assert gate.policy.current.digest == after


def test_the_config_names_each_policy_problem(tmp_path):
    from node.cli.config import check_file

    write_policy(
        tmp_path,
        '@id("typo") @approver("2")\npermit (principal, action == Action::"spend", resource);\n'
        '@id("loose") @budget("amount 5 per day")\npermit (principal, action, resource);\n'
        '@id("bad-field")\npermit (principal, action == Action::"spend", resource)\n'
        'when { context.request.colour == "red" };\n',
    )
    path = write_config(tmp_path, POLICY_TOML + '\n[policy.requests.refund]\namount = "Money"\n')
    problems = "\n".join(check_file(path))
    assert "policy typo: unknown annotation @approver" in problems
    assert "policy loose: a @budget needs the policy scoped to its capabilities" in problems
    assert "policy.requests.refund.amount: 'Money' is not a type" in problems
    write_policy(
        tmp_path,
        '@id("bad-field")\npermit (principal, action == Action::"spend", resource)\n'
        'when { context.request.colour == "red" };\n',
    )
    problems = "\n".join(check_file(write_config(tmp_path, POLICY_TOML)))
    assert "policy bad-field:" in problems and "colour" in problems
    gated = (
        '[[agents]]\nname = "payer"\ncomponent = "payer.wasm"\n'
        '[agents.capabilities]\nspend = true\n[agents.approval]\nspend = "policy"\n'
        "refund = 3\n"
    )
    problems = "\n".join(check_file(write_config(tmp_path / "bare", gated)))
    assert 'agents[0].approval.spend: "policy" needs policy files' in problems
    assert 'agents[0].approval.refund: expected a boolean, or "policy"' in problems


async def test_a_replay_rebuilds_the_same_decisions_budgets_and_approvals(client):
    """What `agent-node replay` checks: the read models rebuilt from the journal alone equal
    the live ones, database by database (charges and endorsements included)."""
    await ask(client, payment(4))
    await ask(client, payment(2, "mallory"))
    task, approval_id = await pending_one(client, ask(client, payment(3000)))
    url = f"/api/v1/approvals/{approval_id}"
    await client.post(url, json={"decision": "approve"}, headers=auth(OPERATE_TOKEN))
    ctx = client.app[CONTEXT]
    rebuilt = ctx.projections.fresh()
    try:
        rebuilt.rebuild(ctx.store.iter_chunks(0, size=3))
        assert rebuilt.disk.summary() == ctx.projections.disk.summary()
        again = rebuilt.get(Approvals)
        assert again.get(approval_id).endorsements[0].operator == "operator"
        assert again.spent("payer", "spend", "small-payments", 0, ctx.store.last_position) == 4
    finally:
        rebuilt.disk.close()
    task.cancel()


async def test_a_budget_is_kept_across_a_restart(config, aiohttp_client):
    from node.app import build_app

    first = await aiohttp_client(build_app(config))
    for n in range(9):
        assert (await ask(first, payment(10, invoice=f"a-{n}"))).outcome == "approve"
    await first.close()
    again = await aiohttp_client(build_app(config))
    assert (await ask(again, payment(10, invoice="a-9"))).outcome == "approve"  # 100: the limit
    task, approval_id = await pending_one(again, ask(again, payment(1, invoice="a-10")))
    asked = gate_of(again).projection.get(approval_id)
    assert asked.policy.reason.endswith("100 spent, 1 more would pass 100")
    task.cancel()


async def test_a_replica_shows_how_far_its_home_is_and_decides_nothing(client):
    """Another node's agent: its approvals replicate here and show as there, and are decided
    on its home only."""
    store = client.app[CONTEXT].store
    slots = [{"count": 1}, {"count": 1, "group": "finance"}]
    asked = {"id": "far-1", "capability": "spend", "approvers": slots}
    await replicate(store, "remote", "approval.requested", asked)
    endorsed = {"id": "far-1", "operator": "fay", "groups": ["finance"]}
    await replicate(store, "remote", "approval.endorsed", endorsed)
    [listed] = await (await client.get("/api/v1/approvals", headers=auth(READ_TOKEN))).json()
    assert listed["approvals"]["progress"] == "1 of 2, waiting for 1 more approver"
    url = "/api/v1/approvals/far-1"
    refused = await client.post(url, json={"decision": "approve"}, headers=auth(OPERATE_TOKEN))
    assert refused.status == 409 and (await refused.json())["home_node"] == "node-b"
    # an endorsement in another journal than the request's changes nothing
    await replicate(store, "elsewhere", "approval.endorsed", {"id": "far-1", "operator": "eve"})
    approvals = client.app[CONTEXT].projections.get(Approvals)
    assert [e.operator for e in approvals.get("far-1").endorsements] == ["fay"]
