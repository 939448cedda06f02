"""Pathological input on every JSON door of a real node: deep nesting, huge integers, names
with a trailing newline. Each is a clear 4xx (or JSON-RPC error), never a 5xx, and stores
nothing that would break a later read."""

from __future__ import annotations

import json

import pytest

from node.web import boundedjson
from tests.runtime.test_runtime_node import agent_toml, start_node
from tests.support import ADMIN_TOKEN, OPERATE_TOKEN, READ_TOKEN, auth

DEEP = "[" * 100_000 + "]" * 100_000
JUST_TOO_DEEP = {"input": json.loads("[" * 64 + "]" * 64)}  # 65 levels with the outer object
HUGE = 10**30


@pytest.fixture
async def node(aiohttp_client, tmp_path, built_agents):
    toml = agent_toml("hostile", built_agents["hostile"], "tick_interval_ms = 60000\nmcp = true")
    _, client, _ = await start_node(aiohttp_client, tmp_path, toml)
    return client


async def problem(response, status: int = 400) -> str:
    assert response.status == status, await response.text()
    assert response.content_type == "application/problem+json"
    return (await response.json())["detail"]


def post(client, path: str, body: bytes | str, token: str = OPERATE_TOKEN):
    headers = {**auth(token), "Content-Type": "application/json"}
    return client.post(path, data=body, headers=headers)


def test_the_decoder_bounds_depth_and_integers():
    assert boundedjson.loads(json.dumps([[1]] * 3)) == [[1]] * 3
    ok = "[" * 64 + "]" * 64
    assert boundedjson.loads(ok)
    with pytest.raises(boundedjson.JsonBoundsError, match="deeper than 64"):
        boundedjson.loads("[" + ok + "]")
    with pytest.raises(boundedjson.JsonBoundsError, match="deeper than 64"):
        boundedjson.loads(DEEP)
    assert boundedjson.loads(str(2**64 - 1)) == 2**64 - 1
    assert boundedjson.loads(str(-(2**63))) == -(2**63)
    with pytest.raises(boundedjson.JsonBoundsError, match="64 bits"):
        boundedjson.loads(json.dumps({"a": [2**64]}))
    with pytest.raises(ValueError, match="malformed"):
        boundedjson.loads("{")


@pytest.mark.parametrize(
    "path",
    ["/api/v1/a2a/tasks", "/api/v1/findings", "/api/v1/approvals/batch", "/api/v1/approvals/x"],
)
async def test_deep_rest_bodies_are_400(node, path):
    detail = await problem(await post(node, path, DEEP))
    assert "nested deeper than 64 levels" in detail


async def test_task_input_past_the_bounds_is_refused_and_the_task_list_still_reads(node):
    for input in (JUST_TOO_DEEP["input"], {"n": HUGE}):
        body = {"from": "tester", "to": "hostile", "input": input}
        await problem(await post(node, "/api/v1/a2a/tasks", json.dumps(body)))
    listed = await node.get("/api/v1/a2a/tasks", headers=auth(READ_TOKEN))
    assert listed.status == 200 and await listed.json() == []


async def test_integers_past_64_bits_are_400(node):
    for query in (f"since={HUGE}", f"limit={HUGE}", "since=" + "9" * 5000):
        detail = await problem(await node.get(f"/api/v1/logs?{query}", headers=auth(READ_TOKEN)))
        assert "non-negative integer" in detail
    pull = f"/api/v1/sync/envelopes?agent=hostile&since={HUGE}"
    await problem(await node.get(pull, headers=auth(ADMIN_TOKEN)))
    body = {"ids": ["a"], "decision": "deny", "extra": HUGE}
    assert "64 bits" in await problem(await post(node, "/api/v1/approvals/batch", json.dumps(body)))


async def test_names_are_matched_whole(node):
    finding = {"agent": "scanner\n", "severity": "low", "title": "t"}
    assert "agent" in await problem(await post(node, "/api/v1/findings", json.dumps(finding)))
    task = {"from": "tester", "to": "hostile\n"}
    await problem(await post(node, "/api/v1/a2a/tasks", json.dumps(task)))


async def jsonrpc(client, path: str, body: str) -> dict:
    response = await post(client, path, body)
    assert response.status == 200, await response.text()
    return (await response.json())["error"]


@pytest.mark.parametrize("path", ["/a2a/hostile", "/api/v1/mcp/hostile"])
async def test_json_rpc_bodies_past_the_bounds_are_rpc_errors(node, path):
    deep = await jsonrpc(node, path, DEEP)
    assert deep["code"] == -32700 and "deeper than 64" in deep["message"]
    huge_id = json.dumps({"jsonrpc": "2.0", "id": HUGE, "method": "ping"})
    assert (await jsonrpc(node, path, huge_id))["code"] == -32600
    nested = {"jsonrpc": "2.0", "id": 1, "method": "x", "params": JUST_TOO_DEEP}
    assert (await jsonrpc(node, path, json.dumps(nested)))["code"] == -32700


async def test_agui_run_bodies_past_the_bounds_are_400(node):
    assert "deeper than 64" in await problem(await post(node, "/agui/hostile", DEEP))
    run = {"threadId": "t", "runId": "r", "state": JUST_TOO_DEEP}
    await problem(await post(node, "/agui/hostile", json.dumps(run)))


async def test_sync_push_bodies_past_the_bounds_are_4xx(node):
    for body in (DEEP, json.dumps({"peer_id": "x", "envelopes": [], "pad": JUST_TOO_DEEP})):
        response = await post(node, "/api/v1/sync/envelopes", body, token=ADMIN_TOKEN)
        assert 400 <= response.status < 500, await response.text()


async def test_a_task_input_over_64_kib_is_413_so_its_event_stays_replicable(node):
    body = {"from": "tester", "to": "hostile", "input": {"blob": "x" * 70_000}}
    detail = await problem(await post(node, "/api/v1/a2a/tasks", json.dumps(body)), 413)
    assert "the task input is" in detail and "the limit is 65536 bytes" in detail
    body["input"] = {"blob": "x" * 60_000}
    assert (await post(node, "/api/v1/a2a/tasks", json.dumps(body))).status == 201
