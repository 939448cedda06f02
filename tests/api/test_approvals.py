"""Approvals over HTTP: the gate as the runtime calls it, decisions, batches, timeouts, restarts."""

from __future__ import annotations

import asyncio
import hashlib
import time

import pytest

from eventstore.store import EventStore
from node.app import JOURNAL_DIR, build_app
from node.context import CONTEXT
from node.services.approvals import APPROVALS, GateClosedError
from tests.polling import until, wait_until
from tests.support import (
    OPERATE_TOKEN,
    READ_TOKEN,
    NodeProcess,
    auth,
    make_config,
    outcome,
    replicate,
    write_config,
)


def gate_of(client):
    return client.app[APPROVALS]


async def ask(client, agent="payer", capability="spend", detail="pay 10 EUR", timeout=None):
    """Start a gate request as the runtime would; returns (its task, the approval id)."""
    gate = gate_of(client)
    before = {r.id for r in gate.projection.list()}
    task = asyncio.create_task(outcome(gate.ask(agent, capability, detail, timeout)))
    new = await until(
        lambda: {r.id for r in gate.projection.list()} - before, what="the request is pending"
    )
    return task, new.pop()


def events_of(client, stream):
    return [
        (e.event.type, e.event.data) for e in client.app[CONTEXT].store.read_stream(stream, 0, 1000)
    ]


async def pending_gauge(client) -> float:
    text = await (await client.get("/api/v1/metrics", headers=auth(READ_TOKEN))).text()
    line = next(x for x in text.splitlines() if x.startswith("svc_approvals_pending "))
    return float(line.split()[-1])


async def test_request_is_listed_and_approval_releases_the_agent(client):
    task, approval_id = await ask(client)
    response = await client.get("/api/v1/approvals", headers=auth(READ_TOKEN))
    assert response.status == 200
    [item] = await response.json()
    assert {k: item[k] for k in ("id", "agent", "capability", "detail", "request")} == {
        "id": approval_id,
        "agent": "payer",
        "capability": "spend",
        "detail": "spend: pay 10 EUR",
        "request": "pay 10 EUR",
    }
    assert item["request_hash"] == "sha256:" + hashlib.sha256(b"pay 10 EUR").hexdigest()
    assert item["requested_at"].endswith("Z")
    assert item["timeout_secs"] == 300
    assert await pending_gauge(client) == 1
    assert not task.done()

    response = await client.post(
        f"/api/v1/approvals/{approval_id}",
        json={"decision": "approve"},
        headers=auth(OPERATE_TOKEN),
    )
    assert response.status == 200
    body = await response.json()
    assert body["id"] == approval_id and body["decision"] == "approve"
    assert body["decided_at"].endswith("Z")
    assert await asyncio.wait_for(task, 5) == "approve"
    assert await (await client.get("/api/v1/approvals", headers=auth(READ_TOKEN))).json() == []
    assert await pending_gauge(client) == 0
    # the audit log: decision, timestamp (the envelope's) and the token's name as operator
    assert events_of(client, "payer")[-1] == (
        "approval.decided",
        {
            "id": approval_id,
            "decision": "approve",
            "operator": "operator",
            "request_hash": item["request_hash"],  # the decision binds to what was shown
        },
    )


async def test_deny_releases_the_agent_with_deny(client):
    task, approval_id = await ask(client)
    response = await client.post(
        f"/api/v1/approvals/{approval_id}", json={"decision": "deny"}, headers=auth()
    )
    assert response.status == 200
    assert (await response.json())["decision"] == "deny"
    assert await asyncio.wait_for(task, 5) == "deny"
    assert events_of(client, "payer")[-1][1]["operator"] == "admin"


async def test_second_decision_and_unknown_id_are_404(client):
    task, approval_id = await ask(client)
    url = f"/api/v1/approvals/{approval_id}"
    assert (await client.post(url, json={"decision": "deny"}, headers=auth())).status == 200
    second = await client.post(url, json={"decision": "approve"}, headers=auth())
    assert second.status == 404
    assert second.content_type == "application/problem+json"
    assert approval_id in (await second.json())["detail"]
    unknown = await client.post(
        "/api/v1/approvals/no-such-id", json={"decision": "approve"}, headers=auth()
    )
    assert unknown.status == 404
    assert await task == "deny"
    assert [t for t, _ in events_of(client, "payer")].count("approval.decided") == 1


async def test_concurrent_decisions_journal_one(client):
    task, approval_id = await ask(client)
    url = f"/api/v1/approvals/{approval_id}"
    responses = await asyncio.gather(
        *(client.post(url, json={"decision": "approve"}, headers=auth()) for _ in range(5))
    )
    assert sorted(r.status for r in responses) == [200, 404, 404, 404, 404]
    assert [t for t, _ in events_of(client, "payer")].count("approval.decided") == 1
    assert await task == "approve"


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b'{"decision": "maybe"}', "decision"),
        (b'{"decision": 1}', "decision"),
        (b"{}", "decision"),
        (b'{"decision": "approve", "extra": 1}', "extra"),
        (b'{"decision": "approve"', "malformed JSON"),
        (b"[]", "object"),
        (b"", "JSON body"),
    ],
)
async def test_bad_decision_bodies_are_400(client, body, needle):
    task, approval_id = await ask(client)
    response = await client.post(
        f"/api/v1/approvals/{approval_id}",
        data=body,
        headers={**auth(), "Content-Type": "application/json"},
    )
    assert response.status == 400
    problem = await response.json()
    assert problem["status"] == 400 and needle in problem["detail"]
    assert gate_of(client).projection.is_pending(approval_id)  # nothing was decided
    task.cancel()


async def test_decisions_need_the_operate_scope(client):
    task, approval_id = await ask(client)
    url = f"/api/v1/approvals/{approval_id}"
    assert (await client.post(url, json={"decision": "approve"})).status == 401
    forbidden = await client.post(url, json={"decision": "approve"}, headers=auth(READ_TOKEN))
    assert forbidden.status == 403
    assert (await client.get("/api/v1/approvals")).status == 401
    assert gate_of(client).projection.is_pending(approval_id)
    task.cancel()


async def test_batched_groups_by_agent_and_capability(client):
    asks = [
        await ask(client, "payer", "spend"),
        await ask(client, "payer", "spend"),
        await ask(client, "payer", "http_fetch"),
        await ask(client, "fetcher", "spend"),
    ]
    response = await client.get("/api/v1/approvals/batched", headers=auth(READ_TOKEN))
    assert response.status == 200
    groups = (await response.json())["groups"]
    assert groups == [
        {"agent": "payer", "capability": "spend", "count": 2, "ids": [asks[0][1], asks[1][1]]},
        {"agent": "payer", "capability": "http_fetch", "count": 1, "ids": [asks[2][1]]},
        {"agent": "fetcher", "capability": "spend", "count": 1, "ids": [asks[3][1]]},
    ]
    for task, _ in asks:
        task.cancel()


async def test_batch_decides_pending_ids_and_skips_the_rest(client):
    asks = [await ask(client) for _ in range(3)]
    ids = [a[1] for a in asks]
    await client.post(f"/api/v1/approvals/{ids[0]}", json={"decision": "deny"}, headers=auth())
    response = await client.post(
        "/api/v1/approvals/batch",
        json={"ids": [*ids, "unknown-id", ids[1]], "decision": "approve"},
        headers=auth(OPERATE_TOKEN),
    )
    assert response.status == 200
    assert await response.json() == {
        "decided": 2,
        "ids": ids[1:],
        "skipped": [ids[0], "unknown-id"],
    }
    assert [await asyncio.wait_for(t, 5) for t, _ in asks] == ["deny", "approve", "approve"]
    assert await pending_gauge(client) == 0
    groups = await (await client.get("/api/v1/approvals/batched", headers=auth())).json()
    assert groups == {"groups": []}


async def test_batch_of_only_unknown_ids_decides_nothing(client):
    response = await client.post(
        "/api/v1/approvals/batch", json={"ids": ["a", "b"], "decision": "deny"}, headers=auth()
    )
    assert response.status == 200
    assert await response.json() == {"decided": 0, "ids": [], "skipped": ["a", "b"]}


@pytest.mark.parametrize(
    "body",
    [
        {"ids": ["x"], "decision": "later"},
        {"ids": "x", "decision": "approve"},
        {"ids": [1], "decision": "approve"},
        {"decision": "approve"},
        {"ids": ["x"]},
    ],
)
async def test_bad_batch_bodies_are_400(client, body):
    task, approval_id = await ask(client)
    body = {**body, "ids": [approval_id]} if body.get("ids") == ["x"] else body
    response = await client.post("/api/v1/approvals/batch", json=body, headers=auth())
    assert response.status == 400
    assert gate_of(client).projection.is_pending(approval_id)
    task.cancel()


async def test_timeout_answers_the_agent_and_leaves_the_list(client):
    task, approval_id = await ask(client, timeout=1)
    items = await (await client.get("/api/v1/approvals", headers=auth())).json()
    assert items[0]["timeout_secs"] == 1
    assert await asyncio.wait_for(task, 5) == "timeout"
    assert await (await client.get("/api/v1/approvals", headers=auth())).json() == []
    late = await client.post(
        f"/api/v1/approvals/{approval_id}", json={"decision": "approve"}, headers=auth()
    )
    assert late.status == 404
    assert events_of(client, "payer")[-1] == ("approval.timed_out", {"id": approval_id})
    resolution = gate_of(client).projection.resolution(approval_id)
    assert resolution is not None and resolution.outcome == "timeout"


async def test_timeout_defaults_come_from_the_agent_policy(tmp_path, aiohttp_client):
    (tmp_path / "a.wasm").write_bytes(b"")
    config = make_config(
        tmp_path,
        '[[agents]]\nname = "payer"\ncomponent = "a.wasm"\n'
        "[agents.capabilities]\nspend = true\n"
        "[agents.approval]\nspend = true\ntimeout_secs = 42\n",
    )
    client = await aiohttp_client(build_app(config))
    task, approval_id = await ask(client)
    pending = gate_of(client).projection.get(approval_id)
    assert pending is not None and pending.timeout_secs == 42
    task.cancel()


async def test_replicated_request_is_listed_but_decided_on_its_home(client):
    store = client.app[CONTEXT].store
    data = {"id": "remote-1", "capability": "spend", "detail": "x", "timeout_secs": 60}
    [result] = await replicate(store, "remote-agent", "approval.requested", data)
    assert result.status == "accepted"
    listed = await (await client.get("/api/v1/approvals", headers=auth())).json()
    assert [i["id"] for i in listed] == ["remote-1"]
    response = await client.post(
        "/api/v1/approvals/remote-1", json={"decision": "approve"}, headers=auth()
    )
    assert response.status == 409
    assert (await response.json())["home_node"] == "node-b"
    batch = await client.post(
        "/api/v1/approvals/batch", json={"ids": ["remote-1"], "decision": "deny"}, headers=auth()
    )
    assert (await batch.json())["skipped"] == ["remote-1"]
    assert gate_of(client).projection.count == 1
    assert not gate_of(client)._timeouts._timers  # its home node times it out, not this one


async def test_restart_rearms_timers_with_the_remaining_time(tmp_path, aiohttp_client):
    config = make_config(tmp_path)
    first = await aiohttp_client(build_app(config))
    task, approval_id = await ask(first, timeout=2)
    await first.close()  # the node stops; the waiting agent is released with GateClosedError
    with pytest.raises(GateClosedError):
        await task
    second = await aiohttp_client(build_app(config))
    listed = await (await second.get("/api/v1/approvals", headers=auth())).json()
    assert [i["id"] for i in listed] == [approval_id]
    await until(lambda: not gate_of(second).projection.count, 5, "the overdue request timed out")
    resolution = gate_of(second).projection.resolution(approval_id)
    assert resolution is not None and resolution.outcome == "timeout"
    assert events_of(second, "payer")[-1] == ("approval.timed_out", {"id": approval_id})


def test_a_real_node_times_out_overdue_requests_at_start_and_the_rest_later(tmp_path):
    """Requests left pending in the journal (as by a node killed while agents waited)."""
    from eventstore.keys import load_or_create_key

    config_path = write_config(tmp_path)
    data_dir = NodeProcess(config_path).config.data_path

    def journal(approval_id: str, timeout: int) -> None:
        store = EventStore(data_dir / JOURNAL_DIR, load_or_create_key(data_dir), "node-a")

        async def write():
            store.start()
            data = {"id": approval_id, "capability": "spend", "detail": "", "timeout_secs": timeout}
            await store.append("payer", "approval.requested", data)
            await store.close()

        asyncio.run(write())

    journal("overdue", 1)
    time.sleep(1.2)  # "overdue" expires while no node is running
    journal("later", 10)  # long enough for a node to start on a loaded host
    with NodeProcess(config_path) as node, node.client() as http:
        listed = [i["id"] for i in http.get("/api/v1/approvals").json()]
        assert listed == ["later"]
        overdue = http.post("/api/v1/approvals/overdue", json={"decision": "approve"})
        assert overdue.status_code == 404
        wait_until(lambda: http.get("/api/v1/approvals").json() == [], 25, "it timed out")
        assert "svc_approvals_pending 0.0" in http.get("/api/v1/metrics").text
    store = EventStore(data_dir / JOURNAL_DIR, load_or_create_key(data_dir), "node-a")
    try:
        journal_events = [(e.event.type, e.event.data["id"]) for e in store.iter_stream("payer")]
    finally:
        store.close_sync()
    assert journal_events == [
        ("approval.requested", "overdue"),
        ("approval.requested", "later"),
        ("approval.timed_out", "overdue"),
        ("approval.timed_out", "later"),
    ]
