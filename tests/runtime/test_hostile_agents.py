"""The purpose-built `hostile` agent (agents/hostile) attacking a real node, case by case.

Each attack is a task: the agent does what its input says and returns what the host answered,
so each test reads the host's answer, the journal and what reached the outside world.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from aiohttp import web

from node.context import CONTEXT
from node.services.tasks import TASKS
from projections.approvals import Approvals
from tests.polling import until
from tests.runtime.test_runtime_node import agent_toml, journal, start_node
from tests.support import OPERATE_TOKEN, READ_TOKEN, auth

SECRET = "hunter2-top-secret-value"
MARKER = "[secret:payments/api_key]"


def hostile_toml(built_agents, extra: str = "", tail: str = "") -> str:
    return (
        agent_toml("hostile", built_agents["hostile"], "tick_interval_ms = 60000\n" + extra) + tail
    )


async def new_task(client, case: str, **input: Any) -> str:
    response = await client.post(
        "/api/v1/a2a/tasks",
        json={"from": "tester", "to": "hostile", "input": {"case": case, **input}},
        headers=auth(OPERATE_TOKEN),
    )
    assert response.status in (200, 201), await response.text()
    return (await response.json())["id"]


def ended(app, task_id: str) -> dict[str, Any] | None:
    for event in journal(app, "hostile"):
        if event.get("id") == task_id and event["type"] in ("task.completed", "task.failed"):
            return event
    return None


# The first test to load the agent after it changed compiles it (tens of seconds on a busy
# machine), so waits for its first answers are generous.
FIRST_LOAD_SECS = 180


async def outcome(app, task_id: str) -> dict[str, Any]:
    return await until(lambda: ended(app, task_id), timeout=FIRST_LOAD_SECS)


async def pending(client) -> dict[str, Any]:
    async def listed() -> list[dict[str, Any]]:
        return await (await client.get("/api/v1/approvals", headers=auth(READ_TOKEN))).json()

    return (await until(listed, FIRST_LOAD_SECS, "an approval is pending"))[0]


def recorder() -> tuple[web.Application, list[dict[str, Any]]]:
    """An outside service that records what it was sent (an action endpoint, a fetch target)."""
    seen: list[dict[str, Any]] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(
            {
                "path": request.path,
                "query": dict(request.query),
                "headers": dict(request.headers),
                "body": await request.text(),
            }
        )
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    return app, seen


# ---- 1. approvals bind to the exact request --------------------------------------------------


async def test_a_padded_request_is_shown_in_full_and_decided_by_its_hash(
    aiohttp_client, aiohttp_server, tmp_path, built_agents
):
    action_app, received = recorder()
    server = await aiohttp_server(action_app)
    toml = hostile_toml(
        built_agents,
        "[agents.capabilities]\nspend = true\n[agents.approval]\nspend = true\n",
        f'\n[actions.spend]\nurl = "http://127.0.0.1:{server.port}/spend"\n',
    )
    app, client, _ = await start_node(aiohttp_client, tmp_path, toml)
    task_id = await new_task(client, "spend", amount=987654321, pad=5000)
    item = await pending(client)

    # the one-line summary is built from the request: the amount first, the padding elided;
    # the full request is listed
    assert len(item["detail"]) <= 1000 and item["detail"].startswith(
        "spend: amount_cents=987654321"
    )
    request = item["request"]
    assert json.loads(request) == {"pad": "x" * 5000, "amount_cents": 987654321}
    assert item["request_hash"] == "sha256:" + hashlib.sha256(request.encode()).hexdigest()
    assert item["task"] == task_id
    (requested,) = journal(app, "hostile", "approval.requested")
    assert requested["request"] == request and requested["request_hash"] == item["request_hash"]

    # a decision made on another request (another hash) is refused and changes nothing
    wrong = "sha256:" + "0" * 64
    refused = await client.post(
        f"/api/v1/approvals/{item['id']}",
        json={"decision": "approve", "request_hash": wrong},
        headers=auth(OPERATE_TOKEN),
    )
    assert refused.status == 409 and item["request_hash"] in (await refused.json())["detail"]
    assert not journal(app, "hostile", "approval.decided")

    approved = await client.post(
        f"/api/v1/approvals/{item['id']}",
        json={"decision": "approve", "request_hash": item["request_hash"]},
        headers=auth(OPERATE_TOKEN),
    )
    assert approved.status == 200
    assert (await approved.json())["request_hash"] == item["request_hash"]
    done = await outcome(app, task_id)
    assert done["type"] == "task.completed"
    # exactly the approved request was performed
    (sent,) = received
    assert json.loads(sent["body"])["request"] == json.loads(request)
    (decided,) = journal(app, "hostile", "approval.decided")
    assert decided["request_hash"] == item["request_hash"]


async def test_an_oversize_request_is_refused_to_the_agent_naming_the_limit(
    aiohttp_client, tmp_path, built_agents
):
    toml = hostile_toml(
        built_agents, "[agents.capabilities]\nspend = true\n[agents.approval]\nspend = true\n"
    )
    app, client, _ = await start_node(aiohttp_client, tmp_path, toml)
    task_id = await new_task(client, "spend", amount=1, pad=70_000)
    done = await outcome(app, task_id)
    assert done["type"] == "task.completed"
    assert done["output"]["error_kind"] == "HostError_Failed"
    assert "the limit is 65536 bytes" in done["output"]["error"]
    assert not journal(app, "hostile", "approval.requested")


# ---- 6. a canceled task's pending approval is denied -------------------------------------------


async def test_canceling_a_task_denies_its_pending_approval_with_the_reason(
    aiohttp_client, tmp_path, built_agents
):
    toml = hostile_toml(
        built_agents, "[agents.capabilities]\nspend = true\n[agents.approval]\nspend = true\n"
    )
    app, client, _ = await start_node(aiohttp_client, tmp_path, toml)
    task_id = await new_task(client, "spend", amount=5)
    item = await pending(client)
    await app[TASKS].cancel(task_id, "alice")

    decided = await until(lambda: journal(app, "hostile", "approval.decided"))
    assert decided[0]["id"] == item["id"] and decided[0]["decision"] == "deny"
    assert decided[0]["reason"] == f"task {task_id} was canceled by alice"
    assert await (await client.get("/api/v1/approvals", headers=auth(READ_TOKEN))).json() == []
    resolved = app[CONTEXT].projections.get(Approvals).resolution(item["id"])
    assert (
        resolved is not None
        and resolved.outcome == "deny"
        and resolved.reason == decided[0]["reason"]
    )
    # its run was parked at the request (docs/agents.md, "A task waiting for people"): the
    # canceled task is not run again. The agent takes tasks oldest first, so once a later
    # one is done, the canceled one would have run before it.
    later = await outcome(app, await new_task(client, "state", size=10))
    assert later["type"] == "task.completed"
    assert [t["id"] for t in journal(app, "hostile", "task.started")] == [task_id, later["id"]]
    assert [t["id"] for t in journal(app, "hostile", "task.completed")] == [later["id"]]


async def test_a_parked_task_whose_approval_expires_gets_the_timeout(
    aiohttp_client, tmp_path, built_agents
):
    """docs/agents.md, "A task waiting for people": the run parked at its request resumes
    when the request expires, and its call ends as an expired approval does."""
    toml = hostile_toml(
        built_agents,
        "[agents.capabilities]\nspend = true\n[agents.approval]\nspend = true\ntimeout_secs = 1\n",
    )
    app, client, _ = await start_node(aiohttp_client, tmp_path, toml)
    task_id = await new_task(client, "spend", amount=5)
    done = await outcome(app, task_id)
    assert done["type"] == "task.completed"
    assert done["output"]["error_kind"] == "HostError_ApprovalTimeout", done
    assert journal(app, "hostile", "approval.timed_out")
    started = [t["id"] for t in journal(app, "hostile", "task.started")]
    assert started == [task_id, task_id], "parked, then resumed once it expired"
    assert not journal(app, "hostile", "agent.errored")


# ---- 2. secrets the agent read never reach the journal ----------------------------------------


async def test_a_secret_put_everywhere_is_redacted_but_used_for_real(
    aiohttp_client, aiohttp_server, tmp_path, built_agents
):
    target_app, fetched = recorder()
    target = await aiohttp_server(target_app)
    toml = hostile_toml(
        built_agents,
        f"""[agents.capabilities]
http_fetch = true
spend = true
[agents.approval]
spend = true
[agents.grants]
domains = ["payments"]
[agents.http]
allow_hosts = ["127.0.0.1:{target.port}"]
""",
        f'\n[secrets.payments]\napi_key = "{SECRET}"\n',
    )
    app, client, _ = await start_node(aiohttp_client, tmp_path, toml)
    url = f"http://127.0.0.1:{target.port}/hook"
    task_id = await new_task(client, "leak", domain="payments", key="api_key", url=url, spend=True)
    item = await pending(client)
    assert MARKER in item["request"] and SECRET not in json.dumps(item)
    await client.post(
        f"/api/v1/approvals/{item['id']}", json={"decision": "approve"}, headers=auth(OPERATE_TOKEN)
    )
    done = await outcome(app, task_id)
    failing = await new_task(client, "leak_fail", domain="payments", key="api_key")
    failed = await outcome(app, failing)

    # the real value went where the agent sent it
    assert fetched[0]["query"] == {"key": SECRET} and fetched[0]["headers"]["X-Key"] == SECRET
    # and nowhere into the journal
    for envelope in app[CONTEXT].store.iter_stream("hostile"):
        assert SECRET.encode() not in envelope.payload, envelope.event.type
    logs = [e["message"] for e in journal(app, "hostile", "log")]
    assert f"the key is {MARKER}" in logs and f"stdout {MARKER}" in logs
    # reported before the spend parked the run, and again by its resumed run
    for finding in journal(app, "hostile", "finding"):
        assert finding["title"] == f"found {MARKER}" and finding["detail"] == f"detail {MARKER}"
    fetch = next(a for a in journal(app, "hostile", "action.performed") if "url" in a)
    assert fetch["url"] == f"{url}?key={MARKER}"
    assert journal(app, "hostile", "task.progress")[0]["progress"] == {"seen": MARKER}
    assert journal(app, "hostile", "state.set")[0]["value"] == MARKER
    assert done["output"]["echo"] == MARKER
    assert failed["type"] == "task.failed" and MARKER in failed["error"]


# ---- 3. bounded agents -------------------------------------------------------------------------


async def test_every_agent_payload_is_capped_with_an_error_naming_the_limit(
    aiohttp_client, tmp_path, built_agents
):
    toml = hostile_toml(built_agents) + agent_toml(
        "other", built_agents["task_worker"], "tick_interval_ms = 60000"
    )
    app, client, _ = await start_node(aiohttp_client, tmp_path, toml)
    big = 70_000
    state = await outcome(app, await new_task(client, "state", size=big))
    progress = await outcome(app, await new_task(client, "progress", size=big))
    output = await outcome(app, await new_task(client, "output", size=big))
    created = await outcome(app, await new_task(client, "create", size=big, to="other"))
    fine = await outcome(app, await new_task(client, "state", size=60_000))

    limit = "the limit is 65536 bytes"
    assert state["type"] == "task.failed" and limit in state["error"]
    assert "state key 'big'" in state["error"]
    assert progress["type"] == "task.failed" and "task progress" in progress["error"]
    assert limit in progress["error"]
    assert output["type"] == "task.failed" and "task output" in output["error"]
    assert limit in output["error"]
    assert created["output"]["error_kind"] == "HostError_Failed"
    assert "task input" in created["output"]["error"] and limit in created["output"]["error"]
    assert fine["type"] == "task.completed" and fine["output"] == {"stored": 60_000}
    assert not journal(app, "other", "task.created")
    assert all(len(e["value"]) <= 65536 for e in journal(app, "hostile", "state.set"))


async def test_cheap_host_calls_do_not_refill_the_run_budget(
    aiohttp_client, tmp_path, built_agents
):
    toml = hostile_toml(built_agents, "tick_timeout_ms = 500\nfuel_per_tick = 1_000_000_000_000")
    app, client, _ = await start_node(aiohttp_client, tmp_path, toml)
    failed = await outcome(app, await new_task(client, "spin"))
    assert failed["type"] == "task.failed"
    assert "deadline exceeded: ran longer than 500 ms" in failed["error"]
    (errored,) = await until(lambda: journal(app, "hostile", "agent.errored"))
    assert errored["kind"] == "deadline"


async def test_a_default_fuel_budget_ends_a_spin_without_fuel_per_tick(
    aiohttp_client, tmp_path, built_agents
):
    # no fuel_per_tick and a deadline far away: the default fuel budget is what stops it
    toml = agent_toml("loop", built_agents["bad_loop"], "tick_timeout_ms = 600000")
    app, _, _ = await start_node(aiohttp_client, tmp_path, toml)
    errored = await until(lambda: journal(app, "loop", "agent.errored"), timeout=120)
    assert errored[0]["kind"] == "fuel"
    assert "used all 2000000000 units" in errored[0]["error"]


async def test_fetch_reaches_only_allowed_host_and_port_with_the_nodes_host_header(
    aiohttp_client, aiohttp_server, tmp_path, built_agents
):
    target_app, seen = recorder()
    target = await aiohttp_server(target_app)
    toml = hostile_toml(
        built_agents,
        f"""[agents.capabilities]
http_fetch = true
[agents.http]
allow_hosts = ["127.0.0.1", "localhost:{target.port}"]
""",
    )
    app, client, _ = await start_node(aiohttp_client, tmp_path, toml)
    # a bare host is its scheme's default port only: not the node's API on another port
    node_url = f"http://127.0.0.1:{client.port}/api/v1/health"
    refused = await outcome(app, await new_task(client, "fetch", request={"url": node_url}))
    assert refused["output"]["error_kind"] == "HostError_NotPermitted"
    spoof = {"url": f"http://localhost:{target.port}/x", "headers": {"Host": "evil.example"}}
    fetched = await outcome(app, await new_task(client, "fetch", request=spoof))
    assert fetched["output"]["result"]["status"] == 200
    assert seen[0]["headers"]["Host"] == f"localhost:{target.port}"


async def test_an_mcp_tool_result_holding_a_secret_is_redacted(
    aiohttp_client, tmp_path, built_agents
):
    toml = hostile_toml(
        built_agents,
        'mcp = true\n[agents.grants]\ndomains = ["payments"]\n',
        f'\n[secrets.payments]\napi_key = "{SECRET}"\n',
    )
    app, client, sink = await start_node(aiohttp_client, tmp_path, toml, sink=True)
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "reveal", "arguments": {"domain": "payments", "key": "api_key"}},
    }
    response = await client.post("/api/v1/mcp/hostile", json=call, headers=auth(OPERATE_TOKEN))
    result = (await response.json())["result"]
    assert result["isError"] is False
    assert json.loads(result["content"][0]["text"]) == {"secret": MARKER}
    assert sink.named("tool_call_end")[0]["result"] == json.dumps({"secret": MARKER})
    assert SECRET not in json.dumps(sink.events)
    for envelope in app[CONTEXT].store.iter_stream("hostile"):
        assert SECRET.encode() not in envelope.payload
