"""Inference through a real node: the tool-calling agent (agents/tool_caller) asks models served
by a real HTTP server in the OpenAI and Anthropic streaming formats (tests/llm_support.py);
what it may use, what each call cost, and what the streams saw."""

from __future__ import annotations

import asyncio
import json
import time

from node.cli.main import main
from node.context import CONTEXT
from tests.llm_support import Reply
from tests.polling import until
from tests.runtime.test_lifecycle import create_task
from tests.runtime.test_runtime_node import agent_toml, journal, start_node
from tests.support import READ_TOKEN, auth

ALLOWED = """[agents.capabilities]
inference = true
[agents.inference]
models = ["small", "claude"]
default = "small"
"""


def models_toml(port: int, extra: str = "") -> str:
    return f"""
[inference]
{extra}
[inference.models.small]
base_url = "http://127.0.0.1:{port}/v1"
model = "small-1"
input_price = 1.5
output_price = 6.0

[inference.models.claude]
provider = "anthropic"
base_url = "http://127.0.0.1:{port}/v1"
model = "claude-test"
api_key_env = "TEST_ANTHROPIC_KEY"
input_price = 3
output_price = 15
route = "cloud"
"""


TOOL_ROUND = Reply(
    tool_calls=[("call_1", "invoice_total", ['{"num', 'ber": "INV-2"}'])],
    input_tokens=30,
    output_tokens=12,
)
ANSWER = Reply(text=["INV-2 ", "totals 80."], input_tokens=45, output_tokens=6)


async def helper_node(
    aiohttp_client, tmp_path, built_agents, llm, agent=ALLOWED, extra="", policy=""
):
    toml = (
        policy
        + models_toml(llm.port, extra)
        + agent_toml("helper", built_agents["tool_caller"], "tick_interval_ms = 60000\n" + agent)
    )
    return await start_node(aiohttp_client, tmp_path, toml, sink=True)


async def outcome(app, client, task_input: dict) -> dict:
    task_id = await create_task(client, task_input, to="helper")

    def ended() -> list[dict]:
        return [
            e
            for e in journal(app, "helper")
            if e["type"] in ("task.completed", "task.failed") and e.get("id") == task_id
        ]

    return (await until(ended, 20, "the task ends"))[0]


async def test_a_tool_calling_round_trip_is_streamed_and_metered(
    aiohttp_client, tmp_path, built_agents, llm
):
    llm.script(TOOL_ROUND, ANSWER)
    app, client, sink = await helper_node(aiohttp_client, tmp_path, built_agents, llm)
    done = await outcome(app, client, {"question": "What is the total of INV-2?"})
    assert done["type"] == "task.completed", done
    assert done["output"] == {
        "answer": "INV-2 totals 80.",
        "rounds": 2,
        "input_tokens": 75,
        "output_tokens": 18,
        "tool_calls": 1,
    }
    first, second = (a.body for a in llm.asked)
    assert first["model"] == "small-1" and first["stream"] is True
    assert first["stream_options"] == {"include_usage": True}
    assert [t["function"]["name"] for t in first["tools"]] == ["invoice_total", "add"]
    assert second["messages"][2]["tool_calls"][0]["function"] == {
        "name": "invoice_total",
        "arguments": '{"number": "INV-2"}',
    }
    assert second["messages"][3] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": '{"total": 80.0}',
    }
    # metered: the server's counts, the cost at 1.5 and 6.0 per million tokens
    calls = journal(app, "helper", "inference.completed")
    assert [(c["input_tokens"], c["output_tokens"]) for c in calls] == [(30, 12), (45, 6)]
    assert [c["cost_nanos"] for c in calls] == [30 * 1500 + 12 * 6000, 45 * 1500 + 6 * 6000]
    assert [c["finish_reason"] for c in calls] == ["tool_calls", "stop"]
    assert {c["model"] for c in calls} == {"small"}
    assert {c["provider_model"] for c in calls} == {"served-model"}
    assert all(c["route"] == "local" and c["duration_ms"] >= 0 for c in calls)
    # streamed: the tool call as AG-UI tool-call events, the answer as tokens
    start = sink.named("TOOL_CALL_START")
    assert [(s["toolCallId"], s["toolCallName"]) for s in start] == [("call_1", "invoice_total")]
    args = [a["delta"] for a in sink.named("TOOL_CALL_ARGS") if a["toolCallId"] == "call_1"]
    assert "".join(args) == '{"number": "INV-2"}'
    assert [e["toolCallId"] for e in sink.named("TOOL_CALL_END")] == ["call_1"]
    tokens = [t["text"] for t in sink.named("token")]
    assert "".join(tokens) == "INV-2 totals 80." and tokens[0] == "INV-2 "
    metrics = await (await client.get("/api/v1/metrics", headers=auth(READ_TOKEN))).text()
    assert 'svc_inference_requests_total{route="local"} 2.0' in metrics
    assert 'svc_inference_tokens_total{agent="helper",kind="input",model="small"} 75.0' in metrics
    assert 'svc_inference_calls_total{agent="helper",model="small",outcome="ok"} 2.0' in metrics


async def test_anthropic_messages_round_trip(
    aiohttp_client, tmp_path, built_agents, llm, monkeypatch
):
    monkeypatch.setenv("TEST_ANTHROPIC_KEY", "sk-ant-test-key-0123456789")
    llm.script(TOOL_ROUND, ANSWER)
    app, client, _ = await helper_node(aiohttp_client, tmp_path, built_agents, llm)
    done = await outcome(app, client, {"question": "INV-2?", "model": "claude"})
    assert done["type"] == "task.completed", done
    assert done["output"]["answer"] == "INV-2 totals 80." and done["output"]["tool_calls"] == 1
    first, second = llm.asked
    assert first.path == "/v1/messages"
    assert first.headers["x-api-key"] == "sk-ant-test-key-0123456789"
    assert first.headers["anthropic-version"] == "2023-06-01"
    assert first.body["system"].startswith("You answer questions about invoices")
    assert first.body["tools"][0]["input_schema"]["required"] == ["number"]
    assert second.body["messages"][1]["content"][0] == {
        "type": "tool_use",
        "id": "call_1",
        "name": "invoice_total",
        "input": {"number": "INV-2"},
    }
    assert second.body["messages"][2]["content"][0]["type"] == "tool_result"
    calls = journal(app, "helper", "inference.completed")
    assert [(c["input_tokens"], c["output_tokens"]) for c in calls] == [(30, 12), (45, 6)]
    assert calls[0]["cost_nanos"] == 30 * 3000 + 12 * 15000 and calls[0]["route"] == "cloud"
    assert [c["finish_reason"] for c in calls] == ["tool_calls", "stop"]
    events = [e for e in app[CONTEXT].store.iter_stream("helper")]
    assert "sk-ant-test-key" not in json.dumps([e.event.data for e in events])


async def test_an_agent_without_the_capability_is_refused(
    aiohttp_client, tmp_path, built_agents, llm
):
    app, client, _ = await helper_node(aiohttp_client, tmp_path, built_agents, llm, agent="")
    done = await outcome(app, client, {"question": "INV-1?"})
    assert done["type"] == "task.failed"
    assert "NotPermitted" in done["error"] and "capabilities.inference" in done["error"]
    assert llm.asked == []


async def test_a_model_the_agent_does_not_list_is_refused(
    aiohttp_client, tmp_path, built_agents, llm
):
    agent = "[agents.capabilities]\ninference = true\n[agents.inference]\nmodels = ['small']\n"
    app, client, _ = await helper_node(aiohttp_client, tmp_path, built_agents, llm, agent=agent)
    done = await outcome(app, client, {"question": "INV-1?", "model": "claude"})
    assert done["type"] == "task.failed"
    assert "model 'claude' is not among the models agent helper may use" in done["error"]
    assert llm.asked == []


async def test_a_429_is_tried_again_after_its_retry_after(
    aiohttp_client, tmp_path, built_agents, llm
):
    llm.script(Reply(status=429, retry_after="0.3"), ANSWER)
    app, client, _ = await helper_node(aiohttp_client, tmp_path, built_agents, llm)
    done = await outcome(app, client, {"question": "hi"})
    assert done["type"] == "task.completed", done
    assert len(llm.asked) == 2
    assert len(journal(app, "helper", "inference.completed")) == 1


async def test_a_retry_after_past_the_deadline_fails_at_once(
    aiohttp_client, tmp_path, built_agents, llm
):
    llm.script(Reply(status=429, retry_after="120"))
    app, client, _ = await helper_node(aiohttp_client, tmp_path, built_agents, llm)
    began = time.monotonic()
    done = await outcome(app, client, {"question": "hi"})
    assert time.monotonic() - began < 8  # the run's deadline is 10 s; nothing waited 120
    assert done["type"] == "task.failed"
    assert "answered 429" in done["error"] and "passes the run's deadline" in done["error"]
    failed = journal(app, "helper", "inference.failed")
    assert failed[0]["model"] == "small" and not failed[0]["refused"]


async def test_an_error_mid_stream_fails_the_call(aiohttp_client, tmp_path, built_agents, llm):
    llm.script(Reply(text=["a", "b", "c"], error_after=2))
    app, client, sink = await helper_node(aiohttp_client, tmp_path, built_agents, llm)
    done = await outcome(app, client, {"question": "hi"})
    assert done["type"] == "task.failed" and "overloaded mid-stream" in done["error"]
    assert journal(app, "helper", "inference.completed") == []
    assert "overloaded mid-stream" in journal(app, "helper", "inference.failed")[0]["error"]
    assert sink.named("TEXT_MESSAGE_END")  # the stream's message is closed all the same


async def test_a_rate_limit_refuses_what_would_wait_past_the_deadline(
    aiohttp_client, tmp_path, built_agents, llm
):
    llm.script(TOOL_ROUND, ANSWER)
    app, client, _ = await helper_node(
        aiohttp_client, tmp_path, built_agents, llm, extra="requests_per_minute = 1"
    )
    done = await outcome(app, client, {"question": "INV-2?"})
    assert done["type"] == "task.failed"
    assert "1 requests per minute" in done["error"], done
    assert len(llm.asked) == 1  # the second round never reached the provider
    refused = journal(app, "helper", "inference.failed")
    assert refused[0]["refused"] is True


async def test_usage_per_agent_and_model_over_http_and_the_cli_and_after_a_restart(
    aiohttp_client, tmp_path, built_agents, llm, capsys
):
    llm.script(TOOL_ROUND, ANSWER, Reply(status=500, error_body="boom"))
    app, client, _ = await helper_node(aiohttp_client, tmp_path, built_agents, llm)
    assert (await outcome(app, client, {"question": "INV-2?"}))["type"] == "task.completed"
    assert (await outcome(app, client, {"question": "again"}))["type"] == "task.failed"
    response = await client.get("/api/v1/usage?agent=helper&since=1h", headers=auth(READ_TOKEN))
    report = await response.json()
    (helper,) = report["agents"]
    (small,) = helper["models"]
    assert (small["calls"], small["errors"], small["refused"]) == (3, 1, 0)
    assert (small["input_tokens"], small["output_tokens"]) == (75, 18)
    assert small["cost_nanos"] == 75 * 1500 + 18 * 6000 and small["cost"] == "0.0002205"
    bad = await client.get("/api/v1/usage?since=forever", headers=auth(READ_TOKEN))
    assert bad.status == 400 and "since" in (await bad.json())["detail"]

    url = str(client.make_url("/")).rstrip("/")
    argv = ["usage", "--url", url, "--token", READ_TOKEN, "--since", "2d"]
    assert await asyncio.to_thread(main, argv) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[1].split() == [
        "AGENT",
        "MODEL",
        "CALLS",
        "ERRORS",
        "REFUSED",
        "INPUT",
        "TOKENS",
        "OUTPUT",
        "TOKENS",
        "COST",
        "MEAN",
        "MS",
    ]
    assert shown[2].split()[:8] == ["helper", "small", "3", "1", "0", "75", "18", "0.0002205"]

    await client.close()  # the same journal, a new node: the fold gives the same usage
    _, client2, _ = await helper_node(aiohttp_client, tmp_path, built_agents, llm)
    again = await client2.get("/api/v1/usage?agent=helper", headers=auth(READ_TOKEN))
    assert (await again.json())["agents"] == report["agents"]
