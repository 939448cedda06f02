"""Real Python agents calling the WIT host functions, tasks and MCP calls through the engine."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

from node.runtime import AgentSpec, AgentUnavailableError, Task
from node.runtime.memhost import MemoryHost
from tests.polling import wait_until
from tests.runtime_support import running


def test_tick_calls_host_functions_and_stdout_becomes_output(built_agents):
    spec = AgentSpec("hello", built_agents["hello"], tick_interval_ms=50)
    with running([spec]) as (runtime, hosts):
        host = hosts["hello"]
        wait_until(lambda: len(host.of_type("run.finished")) >= 3)
        logs = host.of_type("log")
        assert logs[0]["level"] == "info" and logs[0]["message"] == "hello from a wasm agent"
        lines = wait_until(lambda: host.of_type("output"))
        assert lines[0] == {"ts": lines[0]["ts"], "stream": "stdout", "line": "hello on stdout"}
        finished = host.of_type("run.finished")[0]
        assert finished["kind"] == "tick" and finished["error"] is None
        assert 10_000 < finished["fuel"] < 50_000_000  # a real fuel figure for one tick
        status = runtime.status("hello")[0]
        assert status.fuel_remaining is None  # fuel_per_tick unset: unlimited
        assert status.fuel_consumed >= finished["fuel"]
        assert status.runs >= 3 and status.restart_count == 0


def test_fuel_remaining_is_the_stores_fuel(built_agents):
    spec = AgentSpec("hello", built_agents["hello"], tick_interval_ms=50, fuel_per_tick=20_000_000)
    with running([spec]) as (runtime, hosts):
        wait_until(lambda: len(hosts["hello"].of_type("run.finished")) >= 2)
        time.sleep(0.01)
        status = runtime.status("hello")[0]
        last = hosts["hello"].of_type("run.finished")[-1]
        assert status.fuel_remaining == 20_000_000 - last["fuel"]


def test_unlimited_fuel_is_counted_per_run_not_accumulated(built_agents):
    # each run's fuel figure is that run's own consumption, also without a fuel limit
    spec = AgentSpec("hello", built_agents["hello"], tick_interval_ms=10)
    with running([spec]) as (_, hosts):
        wait_until(lambda: len(hosts["hello"].of_type("run.finished")) >= 6)
    fuels = [r["fuel"] for r in hosts["hello"].of_type("run.finished")]
    assert all(10_000 < fuel < 50_000_000 for fuel in fuels)
    assert max(fuels[1:]) < 2 * min(fuels[1:])  # the same tick's work, not a running total


def test_payer_spends_through_the_approval_decision(built_agents):
    decisions = iter(["approve", "deny", "timeout", "approve"])
    host = MemoryHost(
        "payer",
        capabilities={"spend"},
        gated={"spend"},
        decide=lambda cap, req: next(decisions, "timeout"),
    )
    spec = AgentSpec("payer", built_agents["payer"], tick_interval_ms=30)
    with running([spec], {"payer": host}):
        wait_until(lambda: len(host.of_type("approval.decided")) >= 4)
    actions = [json.loads(a["request"])["invoice"] for a in host.of_type("action")]
    assert actions[:2] == ["INV-0001", "INV-0003"]  # 2 was denied, 3 timed out then approved
    messages = [m["message"] for m in host.of_type("log")]
    assert messages[:4] == [
        'paid INV-0001: {"status": "done"}',
        "payment of INV-0002 denied: spend denied by operator",
        "no decision on INV-0003 yet, retrying next tick",
        'paid INV-0003: {"status": "done"}',
    ]
    assert host.state["paid"] >= "2"


def test_capability_not_enabled_is_not_permitted(built_agents):
    host = MemoryHost("payer")  # no capabilities
    spec = AgentSpec("payer", built_agents["payer"], tick_interval_ms=30)
    with running([spec], {"payer": host}):
        finding = wait_until(lambda: host.of_type("finding"))[0]
    assert finding["severity"] == "high" and finding["title"] == "spend not permitted"
    assert finding["detail"] == "INV-0001: capability spend is not enabled"
    assert not host.of_type("action") and not host.of_type("approval.requested")


def test_blocked_host_call_does_not_count_against_the_deadline(built_agents):
    def slow_operator(capability: str, request: str) -> str:
        time.sleep(0.6)  # three times the wasm time budget
        return "approve"

    host = MemoryHost("payer", capabilities={"spend"}, gated={"spend"}, decide=slow_operator)
    spec = AgentSpec("payer", built_agents["payer"], tick_interval_ms=10, tick_timeout_ms=200)
    with running([spec], {"payer": host}) as (runtime, _):
        wait_until(lambda: len(host.of_type("action")) >= 2)
        assert runtime.status("payer")[0].status != "error"
    assert not host.of_type("agent.errored")
    assert all(r["error"] is None for r in host.of_type("run.finished"))
    assert max(r["duration_ms"] for r in host.of_type("run.finished")) >= 600


def test_secret_needs_a_grant_checked_on_every_call(built_agents):
    host = MemoryHost(
        "secrets_reader", secrets={("payments", "api_key"): "s3cr3t-value"}, granted={"payments"}
    )
    spec = AgentSpec("secrets_reader", built_agents["secrets_reader"], tick_interval_ms=30)
    with running([spec], {"secrets_reader": host}):
        wait_until(lambda: host.state.get("secret_status") == "ok:12")
        host.granted.discard("payments")  # revoke: the very next call is refused
        wait_until(lambda: host.state.get("secret_status") == "denied")
        host.granted.add("payments")
        wait_until(lambda: host.state.get("secret_status") == "ok:12")
    assert all(
        "s3cr3t-value" not in str(data)
        for t, data in host.events
        if t != "state.set" or data["key"] != "secret"
    )
    assert host.of_type("secret.accessed")[0] == {
        "ts": host.of_type("secret.accessed")[0]["ts"],
        "domain": "payments",
        "key": "api_key",
    }


def test_inference_result_reaches_the_agent(built_agents):
    host = MemoryHost(
        "inference", infer_reply="Three invoices are pending.", state={"route": "cloud"}
    )
    spec = AgentSpec("inference", built_agents["inference"], tick_interval_ms=30)
    with running([spec], {"inference": host}):
        wait_until(lambda: host.state.get("last_answer"))
    assert host.state["last_answer"] == "Three invoices are pending."
    request = json.loads(host.of_type("inference")[0]["request"])
    assert request["route"] == "cloud" and request["max_tokens"] == 32


def test_tasks_are_delivered_in_order_with_progress(built_agents):
    host = MemoryHost("task_worker")
    host.tasks.extend(
        [
            Task("t1", "alice", json.dumps({"numbers": [1, 2, 3]})),
            Task("t2", "alice", json.dumps({"fail": "cannot do that"})),
            Task("t3", "bob", json.dumps({"delegate_to": "payer", "numbers": [4]})),
        ]
    )
    spec = AgentSpec("task_worker", built_agents["task_worker"], tick_interval_ms=5000)
    with running([spec], {"task_worker": host}) as (runtime, _):
        wait_until(lambda: host.of_type("task.completed") and len(host.of_type("task.failed")))
        wait_until(lambda: len(host.of_type("task.completed")) == 2)
        host.tasks.append(Task("t4", "carol", json.dumps({"numbers": [10, 20]})))
        runtime.notify_task("task_worker")  # delivered now, not at the next tick (5 s)
        wait_until(lambda: len(host.of_type("task.completed")) == 3, timeout=2)
    started = [e["id"] for e in host.of_type("task.started")]
    assert started == ["t1", "t2", "t3", "t4"]
    progress = [(e["id"], json.loads(e["progress"])) for e in host.of_type("task.progress")]
    assert progress[:3] == [
        ("t1", {"done": 1, "of": 3}),
        ("t1", {"done": 2, "of": 3}),
        ("t1", {"done": 3, "of": 3}),
    ]
    done = {e["id"]: json.loads(e["output"]) for e in host.of_type("task.completed")}
    assert done["t1"] == {"sum": 6, "count": 3} and done["t4"] == {"sum": 30, "count": 2}
    assert done["t3"] == {"delegated": "task-1"}
    assert host.of_type("task.created")[0]["to"] == "payer"
    assert host.of_type("task.failed") == [
        {"ts": host.of_type("task.failed")[0]["ts"], "id": "t2", "error": "cannot do that"}
    ]


def test_task_for_an_agent_without_handle_task_fails(built_agents):
    host = MemoryHost("err")
    host.tasks.append(Task("t1", "alice", "{}"))
    spec = AgentSpec("err", built_agents["bad_loop"], tick_interval_ms=60_000, tick_timeout_ms=50)
    with running([spec], {"err": host}):
        failed = wait_until(lambda: host.of_type("task.failed"))
    assert "does not export `handle-task`" in failed[0]["error"]


async def test_mcp_tools_run_on_the_worker_thread(built_agents):
    spec = AgentSpec("mcp_tools", built_agents["mcp_tools"], tick_interval_ms=60_000, mcp=True)
    with running([spec]) as (runtime, hosts):
        await asyncio.to_thread(wait_until, lambda: hosts["mcp_tools"].of_type("agent.started"))
        tools = await runtime.list_tools("mcp_tools")
        assert [t.name for t in tools] == ["add", "divide", "remember"]
        assert json.loads(tools[0].input_schema)["required"] == ["a", "b"]
        added = await runtime.call_tool("mcp_tools", "add", '{"a": 2, "b": 40}')
        assert added.ok and json.loads(added.text) == {"result": 42}
        failed = await runtime.call_tool("mcp_tools", "divide", '{"a": 1, "b": 0}')
        assert (failed.ok, failed.text) == (False, "division by zero")
        noted = await runtime.call_tool("mcp_tools", "remember", '{"note": "hi"}')
        assert noted.ok and hosts["mcp_tools"].state["note"] == "hi"
        # Every host call and hook ran on the agent's worker, never on the event loop.
        assert hosts["mcp_tools"].threads == {"agent-mcp_tools"}
        assert threading.current_thread().name not in hosts["mcp_tools"].threads
        assert runtime.status("mcp_tools")[0].restart_count == 0


async def test_mcp_call_that_traps_restarts_the_agent(built_agents):
    spec = AgentSpec("mcp_tools", built_agents["mcp_tools"], tick_interval_ms=60_000, mcp=True)
    with running([spec], restart_backoff_ms=200) as (runtime, hosts):
        host = hosts["mcp_tools"]
        await asyncio.to_thread(wait_until, lambda: host.of_type("agent.started"))
        with pytest.raises(Exception, match="RuntimeError: crash requested"):
            await runtime.call_tool("mcp_tools", "crash", "{}")
        assert runtime.status("mcp_tools")[0].status == "error"
        with pytest.raises(AgentUnavailableError, match="is in error"):
            await runtime.call_tool("mcp_tools", "add", '{"a": 1, "b": 1}')
        await asyncio.to_thread(wait_until, lambda: len(host.of_type("agent.started")) == 2)
        again = await runtime.call_tool("mcp_tools", "add", '{"a": 1, "b": 1}')
        assert again.ok and runtime.status("mcp_tools")[0].restart_count == 1
