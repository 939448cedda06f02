"""The runtime inside the node: host calls journaled, status and MCP over HTTP, metrics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from node.api import a2a, approvals, grants
from node.api import runtime as area
from node.app import AREAS, build_app
from node.context import CONTEXT
from node.runtime.limits import DEFAULT_FUEL_PER_TICK
from node.streams.bus import BUS
from tests.polling import until
from tests.support import OPERATE_TOKEN, PUBLISH_TOKEN, READ_TOKEN, auth, make_config


class Sink:
    """Records what the runtime publishes to the node's event bus (and passes it on)."""

    def __init__(self, app: web.Application) -> None:
        self.events: list[tuple[str | None, str, dict[str, Any]]] = []
        bus = app[BUS]
        forward = bus.publish_threadsafe

        def publish_threadsafe(name: str, data: dict[str, Any], *, agent: str | None = None):
            self.events.append((agent, name, data))
            forward(name, data, agent=agent)

        bus.publish_threadsafe = publish_threadsafe

    def named(self, event: str) -> list[dict[str, Any]]:
        return [d for _, e, d in list(self.events) if e == event]


def agent_toml(name: str, component: Path, extra: str = "") -> str:
    return f"""
[[agents]]
name = "{name}"
component = "{component}"
{extra}
"""


async def start_node(aiohttp_client, tmp_path: Path, toml: str, sink: bool = False):
    """The node app with the runtime area (and the areas it uses, until node.app has them)."""
    app = build_app(make_config(tmp_path, toml))
    for extra in (approvals, grants, a2a, area):
        if extra not in AREAS:
            extra.setup(app)
    recorder = Sink(app) if sink else None
    client = await aiohttp_client(app)
    return app, client, recorder


async def decide(client, decision: str, reason: str | None = None) -> str:
    """Decide the one pending approval over HTTP, as an operator does."""

    async def listed() -> list[dict]:
        return await (await client.get("/api/v1/approvals", headers=auth(READ_TOKEN))).json()

    pending = (await until(listed, 15, "an approval is pending"))[0]
    response = await client.post(
        f"/api/v1/approvals/{pending['id']}",
        json={"decision": decision} | ({"reason": reason} if reason else {}),
        headers=auth(OPERATE_TOKEN),
    )
    assert response.status == 200
    return pending["id"]


def journal(app: web.Application, agent: str, type_: str | None = None) -> list[dict]:
    return [
        {"type": e.event.type, **e.event.data}
        for e in app[CONTEXT].store.iter_stream(agent)
        if type_ is None or e.event.type == type_
    ]


async def test_status_reports_every_agent_with_measured_figures(
    aiohttp_client, tmp_path, built_agents
):
    toml = agent_toml(
        "hello", built_agents["hello"], "tick_interval_ms = 50\nfuel_per_tick = 50_000_000"
    ) + agent_toml("trap", built_agents["bad_trap"], "tick_interval_ms = 50")
    app, client, _ = await start_node(aiohttp_client, tmp_path, toml)
    await until(lambda: journal(app, "hello", "log"))
    await until(lambda: journal(app, "trap", "agent.errored"))

    response = await client.get("/api/v1/status", headers=auth(READ_TOKEN))
    assert response.status == 200
    by_name = {s["name"]: s for s in await response.json()}
    hello = by_name["hello"]
    assert set(hello) == {
        "name",
        "status",
        "uptime_ms",
        "last_activity_ms_ago",
        "restart_count",
        "memory_profile",
    }
    assert hello["status"] in ("idle", "running") and hello["restart_count"] == 0
    assert hello["memory_profile"]["heap_bytes"] > 1 << 20
    assert 0 < hello["memory_profile"]["fuel_remaining"] <= 50_000_000
    assert hello["uptime_ms"] >= hello["last_activity_ms_ago"] >= 0

    one = await client.get("/api/v1/status?agent=trap", headers=auth(READ_TOKEN))
    (trap,) = await one.json()
    # no fuel_per_tick in its config: the default budget (node.runtime.limits), never unlimited,
    # less the few units its trapping run took (Winch counts its `unreachable`, Cranelift not)
    assert trap["name"] == "trap"
    assert trap["memory_profile"]["fuel_remaining"] > DEFAULT_FUEL_PER_TICK - 100
    assert trap["memory_profile"]["fuel_remaining"] <= DEFAULT_FUEL_PER_TICK
    missing = await client.get("/api/v1/status?agent=nope", headers=auth(READ_TOKEN))
    assert missing.status == 404
    assert (await client.get("/api/v1/status")).status == 401

    errored = journal(app, "trap", "agent.errored")[0]
    assert errored["kind"] == "trap" and "out of bounds" in errored["error"]
    await until(lambda: journal(app, "trap", "agent.restarted"))
    metrics = await (await client.get("/api/v1/metrics", headers=auth(READ_TOKEN))).text()
    assert "svc_agents_total 2.0" in metrics
    fuel = [
        ln for ln in metrics.splitlines() if ln.startswith('svc_fuel_consumed_total{agent="hello"}')
    ]
    assert float(fuel[0].split()[-1]) > 0
    restarts = [
        ln for ln in metrics.splitlines() if ln.startswith('svc_agent_restarts_total{agent="trap"}')
    ]
    assert float(restarts[0].split()[-1]) >= 1


async def test_logs_and_stdout_are_journaled(aiohttp_client, tmp_path, built_agents):
    app, client, _ = await start_node(
        aiohttp_client,
        tmp_path,
        agent_toml("hello", built_agents["hello"], "tick_interval_ms = 50"),
    )
    await until(lambda: len(journal(app, "hello", "log")) >= 4)
    response = await client.get("/api/v1/logs", headers=auth(READ_TOKEN))
    logs = (await response.json())["logs"]
    messages = {(entry["agent"], entry["level"], entry["message"]) for entry in logs}
    assert ("hello", "info", "hello from a wasm agent") in messages
    assert ("hello", "info", "hello on stdout") in messages
    assert journal(app, "hello")[0]["type"] == "agent.started"


async def test_payer_spend_is_gated_journaled_and_posted(
    aiohttp_client, aiohttp_server, tmp_path, built_agents
):
    received: list[dict] = []

    async def spend_endpoint(request: web.Request) -> web.Response:
        received.append(await request.json())
        return web.json_response({"payment_id": f"pay-{len(received)}"})

    action_app = web.Application()
    action_app.router.add_post("/spend", spend_endpoint)
    server = await aiohttp_server(action_app)
    toml = (
        agent_toml(
            "payer",
            built_agents["payer"],
            """tick_interval_ms = 20
[agents.capabilities]
spend = true
[agents.approval]
spend = true
timeout_secs = 1
""",
        )
        + f'\n[actions.spend]\nurl = "http://127.0.0.1:{server.port}/spend"\n'
    )
    app, client, _ = await start_node(aiohttp_client, tmp_path, toml)
    await decide(client, "approve")
    await until(lambda: received)
    await decide(client, "deny", "INV-0002 was paid by hand")
    await until(lambda: journal(app, "payer", "approval.timed_out"))  # nobody decides: 1 s
    await decide(client, "approve")
    await until(lambda: len(received) == 2)

    assert [r["request"]["invoice"] for r in received] == ["INV-0001", "INV-0003"]
    assert received[0]["agent"] == "payer" and received[0]["capability"] == "spend"
    performed = journal(app, "payer", "action.performed")
    assert performed[0]["capability"] == "spend" and performed[0]["status"] == 200
    messages = [e["message"] for e in journal(app, "payer", "log")]
    assert messages[0] == 'paid INV-0001: {"status": 200, "body": {"payment_id": "pay-1"}}'
    # the operator's reason reaches the agent in its approval-denied error
    assert messages[1] == (
        "payment of INV-0002 denied: operator 'operator' denied spend: INV-0002 was paid by hand"
    )
    decided = journal(app, "payer", "approval.decided")
    assert [d["decision"] for d in decided] == ["approve", "deny", "approve"]
    assert decided[0]["operator"] == "operator"
    assert messages[2].startswith("no decision on INV-0003 yet")
    requested = journal(app, "payer", "approval.requested")[0]
    assert requested["capability"] == "spend" and '"INV-0001"' in requested["detail"]
    assert journal(app, "payer", "state.set")[0] == {
        "type": "state.set",
        "key": "next_invoice",
        "value": "2",
    }


async def test_secret_grant_is_checked_at_every_call_and_never_journaled(
    aiohttp_client, tmp_path, built_agents
):
    toml = (
        agent_toml(
            "reader",
            built_agents["secrets_reader"],
            """tick_interval_ms = 30
[agents.grants]
domains = ["payments"]
""",
        )
        + '\n[secrets.payments]\napi_key = "top-secret-value-42"\n'
    )
    app, client, _ = await start_node(aiohttp_client, tmp_path, toml)

    def statuses() -> list[str]:
        return [
            e["value"] for e in journal(app, "reader", "state.set") if e["key"] == "secret_status"
        ]

    await until(lambda: "ok:19" in statuses())
    revoke = await client.post(
        "/api/v1/broker/grants/reader/payments/revoke", headers=auth(OPERATE_TOKEN)
    )
    assert revoke.status == 200
    await until(lambda: statuses()[-1] == "denied")  # the next call after the revoke
    restore = await client.post(
        "/api/v1/broker/grants/reader/payments/restore", headers=auth(OPERATE_TOKEN)
    )
    assert restore.status == 200
    await until(lambda: statuses()[-1] == "ok:19")
    accessed = journal(app, "reader", "secret.accessed")
    assert accessed[0] == {"type": "secret.accessed", "domain": "payments", "key": "api_key"}
    for envelope in app[CONTEXT].store.iter_stream("reader"):
        assert b"top-secret-value-42" not in envelope.payload


async def test_tasks_from_the_journal_are_worked_and_journaled(
    aiohttp_client, tmp_path, built_agents
):
    toml = agent_toml(
        "worker", built_agents["task_worker"], "tick_interval_ms = 60000"
    ) + agent_toml("helper", built_agents["task_worker"], "tick_interval_ms = 60000")
    app, _, _ = await start_node(aiohttp_client, tmp_path, toml)
    store = app[CONTEXT].store
    await until(lambda: journal(app, "worker", "agent.started"))
    await store.append(
        "worker",
        "task.created",
        {"id": "t-1", "from": "alice", "to": "worker", "input": {"numbers": [1, 2, 3]}},
    )
    await store.append(
        "worker",
        "task.created",
        {
            "id": "t-2",
            "from": "alice",
            "to": "worker",
            "input": {"delegate_to": "helper", "numbers": [5, 5]},
        },
    )
    await store.append(
        "worker",
        "task.created",
        {"id": "t-3", "from": "alice", "to": "worker", "input": {"fail": "no can do"}},
    )
    await until(lambda: journal(app, "worker", "task.failed"))
    await until(lambda: journal(app, "helper", "task.completed"))
    events = [
        (e["type"], e.get("id"))
        for e in journal(app, "worker")
        if e["type"].startswith("task.") and e["type"] != "task.created"
    ]
    assert events == [
        ("task.started", "t-1"),
        ("task.progress", "t-1"),
        ("task.progress", "t-1"),
        ("task.progress", "t-1"),
        ("task.completed", "t-1"),
        ("task.started", "t-2"),
        ("task.completed", "t-2"),
        ("task.started", "t-3"),
        ("task.failed", "t-3"),
    ]
    completed = journal(app, "worker", "task.completed")
    assert completed[0]["output"] == {"sum": 6, "count": 3}
    assert journal(app, "worker", "task.progress")[2]["progress"] == {"done": 3, "of": 3}
    (delegated,) = journal(app, "helper", "task.created")
    assert delegated["from"] == "worker" and delegated["input"] == {"numbers": [5, 5]}
    assert completed[1]["output"] == {"delegated": delegated["id"]}
    assert journal(app, "helper", "task.completed")[0]["output"] == {"sum": 10, "count": 2}
    assert journal(app, "worker", "task.failed")[0]["error"] == "no can do"


async def test_unfinished_tasks_resume_after_a_node_restart(aiohttp_client, tmp_path, built_agents):
    component = tmp_path / "worker.wasm"  # absent on the first start: the agent cannot load
    toml = agent_toml("worker", component, "tick_interval_ms = 60000")
    app, client, _ = await start_node(aiohttp_client, tmp_path, toml)
    await app[CONTEXT].store.append(
        "worker",
        "task.created",
        {"id": "t-9", "from": "alice", "to": "worker", "input": {"numbers": [4, 5]}},
    )
    await until(lambda: journal(app, "worker", "agent.errored"))
    await client.close()  # the node stops with the task unfinished

    component.write_bytes(built_agents["task_worker"].read_bytes())
    app2, _, _ = await start_node(aiohttp_client, tmp_path, toml)
    await until(lambda: journal(app2, "worker", "task.completed"))
    assert journal(app2, "worker", "task.completed")[0]["output"] == {"sum": 9, "count": 2}


async def test_inference_streams_tokens(aiohttp_client, aiohttp_server, tmp_path, built_agents):
    seen: list[dict] = []

    async def completions(request: web.Request) -> web.StreamResponse:
        seen.append(await request.json())
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for word in ["Three ", "invoices ", "are ", "pending."]:
            chunk = {"choices": [{"index": 0, "delta": {"content": word}}]}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        return response

    llm = web.Application()
    llm.router.add_post("/v1/chat/completions", completions)
    server = await aiohttp_server(llm)
    toml = f'\n[inference]\nlocal_url = "http://127.0.0.1:{server.port}/v1"\n' + agent_toml(
        "thinker",
        built_agents["inference"],
        "tick_interval_ms = 60000\n[agents.capabilities]\ninference = true",
    )
    app, client, sink = await start_node(aiohttp_client, tmp_path, toml, sink=True)
    answers = await until(
        lambda: [e for e in journal(app, "thinker", "state.set") if e["key"] == "last_answer"]
    )
    assert answers[0]["value"] == "Three invoices are pending."
    assert seen[0]["stream"] is True and seen[0]["max_tokens"] == 32
    assert seen[0]["messages"][0]["role"] == "user"
    # every token's text in order; the first at once, those right behind it joined (one
    # event per `[inference] stream_window_ms`: tests/inference/test_inference_stream.py)
    tokens = [t["text"] for t in sink.named("token")]
    assert "".join(tokens) == "Three invoices are pending." and tokens[0] == "Three "
    content = sink.named("TEXT_MESSAGE_CONTENT")
    run_id = sink.named("RUN_STARTED")[0]["run_id"]
    assert all(c["run_id"] == run_id and c["agent"] == "thinker" for c in content)
    assert sink.named("TEXT_MESSAGE_START") and sink.named("TEXT_MESSAGE_END")
    await until(lambda: sink.named("agent_complete"))
    metrics = await (await client.get("/api/v1/metrics", headers=auth(READ_TOKEN))).text()
    assert 'svc_inference_requests_total{route="local"} 1.0' in metrics


async def test_mcp_endpoint(aiohttp_client, tmp_path, built_agents):
    toml = agent_toml(
        "tools", built_agents["mcp_tools"], "tick_interval_ms = 60000\nmcp = true"
    ) + agent_toml("hello", built_agents["hello"], "tick_interval_ms = 60000")
    app, client, sink = await start_node(aiohttp_client, tmp_path, toml, sink=True)
    await until(lambda: journal(app, "tools", "agent.started"))
    headers = auth(OPERATE_TOKEN)

    async def rpc(body: Any, agent: str = "tools") -> tuple[int, Any]:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        response = await client.post(f"/api/v1/mcp/{agent}", data=raw, headers=headers)
        return response.status, (await response.json() if response.status == 200 else None)

    _, init = await rpc(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": "2025-06-18"},
        }
    )
    assert init["result"]["protocolVersion"] == "2025-06-18"
    assert init["result"]["capabilities"] == {
        "tools": {"listChanged": False},
        "logging": {},
        "resources": {"subscribe": True, "listChanged": False},
        "prompts": {"listChanged": False},
        "completions": {},
    }
    assert (await rpc({"jsonrpc": "2.0", "method": "notifications/initialized"}))[0] == 202
    assert (await rpc({"jsonrpc": "2.0", "id": 2, "method": "ping"}))[1]["result"] == {}

    _, listed = await rpc({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}})
    tools = listed["result"]["tools"]
    assert [t["name"] for t in tools] == ["add", "divide", "remember"]
    assert tools[0]["inputSchema"] == {
        "type": "object",
        "required": ["a", "b"],
        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
    }
    _, added = await rpc(
        {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "tools/call",
            "params": {"name": "add", "arguments": {"a": 1, "b": 2}},
        }
    )
    assert added["result"] == {
        "content": [{"type": "text", "text": '{"result": 3}'}],
        "isError": False,
    }
    _, failed = await rpc(
        {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "tools/call",
            "params": {"name": "divide", "arguments": {"a": 1, "b": 0}},
        }
    )
    assert failed["result"]["isError"] is True
    assert failed["result"]["content"][0]["text"] == "division by zero"
    assert sink.named("tool_call_start")[0] == {
        "agent": "tools",
        "tool": "add",
        "args": {"a": 1, "b": 2},
    }
    assert sink.named("tool_call_end")[0] == {
        "agent": "tools",
        "tool": "add",
        "result": '{"result": 3}',
    }
    tool_run = sink.named("TOOL_CALL_START")[0]
    assert tool_run["tool"] == "add"
    assert [e for _, e, d in sink.events if d.get("run_id") == tool_run["run_id"]] == [
        "RUN_STARTED",
        "TOOL_CALL_START",
        "TOOL_CALL_END",
        "RUN_FINISHED",
    ]

    async def code(body: Any) -> int:
        return (await rpc(body))[1]["error"]["code"]

    assert await code({"jsonrpc": "2.0", "id": 6, "method": "server/discover"}) == -32601
    assert (
        await code({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "nope"}})
        == -32602
    )
    assert (
        await code(
            {
                "jsonrpc": "2.0",
                "id": 8,
                "method": "tools/call",
                "params": {"name": "add", "arguments": [1]},
            }
        )
        == -32602
    )
    assert await code({"id": 9, "method": "tools/list"}) == -32600
    assert await code(b"{not json") == -32700
    assert (await rpc({"jsonrpc": "2.0", "id": 1, "method": "ping"}, agent="hello"))[0] == 404
    assert (await rpc({"jsonrpc": "2.0", "id": 1, "method": "ping"}, agent="nope"))[0] == 404
    get = await client.get("/api/v1/mcp/tools", headers=headers)
    assert get.status == 405
    denied = await client.post("/api/v1/mcp/tools", data=b"{}", headers=auth(READ_TOKEN))
    assert denied.status == 403


async def test_component_from_the_registry_loads_once_published(
    aiohttp_client, tmp_path, built_agents
):
    from node.api import registry

    toml = agent_toml("tiny", "registry:tiny@1.0.0", "tick_interval_ms = 60000")
    app = build_app(make_config(tmp_path, toml))
    for extra in (approvals, grants, a2a, registry, area):
        if extra not in AREAS:
            extra.setup(app)
    client = await aiohttp_client(app)
    error = (await until(lambda: journal(app, "tiny", "agent.errored")))[0]
    assert error["kind"] == "load" and "not published" in error["error"]

    form = aiohttp.FormData()
    form.add_field("id", "tiny")
    form.add_field("version", "1.0.0")
    form.add_field(
        "wasm",
        built_agents["bad_err"].read_bytes(),
        filename="tiny.wasm",
        content_type="application/wasm",
    )
    published = await client.post(
        "/api/v1/registry/packages", data=form, headers=auth(PUBLISH_TOKEN)
    )
    assert published.status == 201, await published.text()
    await until(lambda: journal(app, "tiny", "agent.restarted"))  # retried with backoff
