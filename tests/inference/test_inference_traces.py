"""Traces: with `[tracing] enabled`, a node sends OpenTelemetry spans over OTLP/HTTP to a real
receiver (an aiohttp server here, decoding the protobuf with opentelemetry-proto): the run, the
inference call under it with the GenAI attributes, the approval wait; the trace id is in the
run's events and in the journaled call; the other host calls (an action, an http_fetch,
create-task) are spans under their runs too."""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from node.ops import tracing
from node.ops.logsetup import ContextFilter
from tests.inference.test_inference_node import ANSWER, TOOL_ROUND, helper_node, outcome
from tests.polling import until
from tests.runtime.test_lifecycle import create_task
from tests.runtime.test_runtime_node import agent_toml, decide, journal, start_node
from tests.support import OPERATE_TOKEN, READ_TOKEN, auth


def value_of(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(v) for v in any_value.array_value.values]
    return getattr(any_value, kind)


class Receiver:
    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.resources: list[dict[str, Any]] = []

    async def traces(self, request: web.Request) -> web.Response:
        assert request.content_type == "application/x-protobuf"
        export = ExportTraceServiceRequest.FromString(await request.read())
        for resource_spans in export.resource_spans:
            resource = {a.key: value_of(a.value) for a in resource_spans.resource.attributes}
            self.resources.append(resource)
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    self.spans.append(
                        {
                            "name": span.name,
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent": span.parent_span_id.hex(),
                            "attributes": {a.key: value_of(a.value) for a in span.attributes},
                            "error": span.status.code == 2,
                        }
                    )
        body = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=body, content_type="application/x-protobuf")

    def named(self, prefix: str) -> list[dict[str, Any]]:
        return [s for s in self.spans if s["name"].startswith(prefix)]


async def collecting(aiohttp_server, receiver: Receiver) -> str:
    """A real OTLP/HTTP endpoint whose spans `receiver` gets: the [tracing] table (its last)
    that exports to it."""
    collector_app = web.Application()
    collector_app.router.add_post("/v1/traces", receiver.traces)
    collector = await aiohttp_server(collector_app)
    return f"""
[tracing]
enabled = true
endpoint = "http://127.0.0.1:{collector.port}/v1/traces"
export_interval_ms = 50
"""


class Lines(logging.Handler):
    """The node's log records as its log handler sees them (with its ContextFilter), the
    root logger at INFO while it is open."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.addFilter(ContextFilter())
        self.records: list[logging.LogRecord] = []
        root = logging.getLogger()
        self._level = root.level
        root.addHandler(self)
        root.setLevel(logging.INFO)

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def close(self) -> None:
        root = logging.getLogger()
        root.removeHandler(self)
        root.setLevel(self._level)
        super().close()


def two(spans: list) -> list | None:
    return spans if len(spans) == 2 else None


def three(spans: list) -> list | None:
    return spans if len(spans) == 3 else None


async def test_runs_and_inference_are_spans_with_the_genai_attributes(
    aiohttp_client, aiohttp_server, tmp_path, built_agents, llm
):
    receiver = Receiver()
    tracing_toml = await collecting(aiohttp_server, receiver) + 'service_name = "node-under-test"\n'
    llm.script(TOOL_ROUND, ANSWER)
    try:
        app, client, sink = await helper_node(
            aiohttp_client, tmp_path, built_agents, llm, policy=tracing_toml
        )
        done = await outcome(app, client, {"question": "INV-2?"})
        assert done["type"] == "task.completed", done
        chats = await until(lambda: two(receiver.named("chat ")), 15, "two chat spans")
        (run,) = await until(lambda: receiver.named("agent.task"), 15, "the task's run span")
        calls = journal(app, "helper", "inference.completed")
    finally:
        await client.close()
        tracing.stop()
    assert receiver.resources[0]["service.name"] == "node-under-test"
    assert run["attributes"]["agent"] == "helper" and run["attributes"]["agent.run_kind"] == "task"
    first, second = chats
    assert first["name"] == "chat small-1"
    assert first["parent"] == run["span_id"] and first["trace_id"] == run["trace_id"]
    attributes = first["attributes"]
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.provider.name"] == "openai"
    assert attributes["gen_ai.request.model"] == "small-1"
    assert attributes["gen_ai.request.max_tokens"] == 256
    assert attributes["gen_ai.response.model"] == "served-model"
    assert attributes["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert attributes["gen_ai.usage.input_tokens"] == 30
    assert attributes["gen_ai.usage.output_tokens"] == 12
    assert second["attributes"]["gen_ai.response.finish_reasons"] == ["stop"]
    # the trace id in the journaled calls and in the run's stream events
    assert {c["trace_id"] for c in calls} == {run["trace_id"]}
    started = [e for e in sink.named("RUN_STARTED") if e.get("kind") == "task"]
    assert started[0]["trace_id"] == run["trace_id"]


async def test_host_calls_and_approval_waits_are_spans_under_their_runs(
    aiohttp_client, aiohttp_server, tmp_path, built_agents, llm
):
    """A task delegated by `worker` (create-task) to `once`, whose task makes a spend that
    waits for approval, an http_fetch POST and an inference: each host call is a span under
    its run's, the approval wait under the spend's; the trace id is in the run's events."""
    receiver = Receiver()
    traced = await collecting(aiohttp_server, receiver)

    async def spend(request: web.Request) -> web.Response:
        return web.json_response({"paid": True})

    async def fetched(request: web.Request) -> web.Response:
        return web.Response(text="fetched")

    target_app = web.Application()
    target_app.router.add_post("/spend", spend)
    target_app.router.add_post("/fetch", fetched)
    target = await aiohttp_server(target_app)
    toml = (
        traced
        + f"""
[actions.spend]
url = "http://127.0.0.1:{target.port}/spend"

[inference]
local_url = "http://127.0.0.1:{llm.port}/v1"
"""
        + agent_toml(
            "once",
            built_agents["once"],
            f"""tick_interval_ms = 60000
[agents.capabilities]
spend = true
http_fetch = true
inference = true
[agents.approval]
spend = true
[agents.http]
allow_hosts = ["127.0.0.1:{target.port}"]
""",
        )
        + agent_toml("worker", built_agents["task_worker"], "tick_interval_ms = 60000")
    )
    steps = [
        {"spend": {"amount": 1, "payee": "acme"}},
        {"fetch": f"http://127.0.0.1:{target.port}/fetch"},
        {"infer": "hello"},
    ]
    lines = Lines()
    try:
        app, client, sink = await start_node(aiohttp_client, tmp_path, toml, sink=True)
        await create_task(client, {"delegate_to": "once", "steps": steps}, to="worker")
        await decide(client, "approve")
        await until(lambda: journal(app, "once", "task.completed"), 20, "the delegated task")
        (fetch,) = await until(lambda: receiver.named("host.http_fetch"), 15, "the fetch span")
        # the delegated task's run is parked at its gated spend and resumed once approved
        # (docs/agents.md, "A task waiting for people"): two runs of `once`, one of `worker`
        runs = await until(lambda: three(receiver.named("agent.task")), 15, "the runs' spans")
        delegated = journal(app, "worker", "task.completed")[0]["output"]["delegated"]
        actions = journal(app, "once", "action.performed")
    finally:
        lines.close()
        await client.close()
        tracing.stop()
    (worker,) = [r for r in runs if r["attributes"]["agent"] == "worker"]
    (create,) = receiver.named("host.create_task")
    assert create["parent"] == worker["span_id"]
    assert create["attributes"]["agent.task.to"] == "once"
    assert create["attributes"]["agent.task.id"] == delegated
    (run,) = [r for r in runs if r["span_id"] == fetch["parent"]]
    (parked,) = [r for r in runs if r["attributes"]["agent"] == "once" and r is not run]
    invokes = {i["parent"]: i for i in receiver.named("host.invoke")}
    assert set(invokes) == {parked["span_id"], run["span_id"]}
    invoke = invokes[run["span_id"]]  # the approved spend, performed once, in the resumed run
    waits = {w["parent"] for w in receiver.named("approval.wait")}
    assert waits == {invokes[parked["span_id"]]["span_id"]}  # people were waited for there
    (chat,) = receiver.named("chat ")
    assert chat["parent"] == run["span_id"]
    assert invoke["attributes"]["capability"] == "spend"
    assert invoke["attributes"]["http.response.status_code"] == 200
    assert fetch["attributes"]["http.request.method"] == "POST"
    assert fetch["attributes"]["server.address"] == "127.0.0.1"
    assert fetch["attributes"]["http.response.status_code"] == 200
    spans = [invoke, fetch, chat]
    assert {s["trace_id"] for s in spans} == {run["trace_id"]}
    run_id = run["attributes"]["agent.run_id"]
    (started,) = [
        e
        for e in sink.named("RUN_STARTED")
        if e.get("run_id") == run_id and e.get("trace_id") == run["trace_id"]
    ]
    (finished,) = [
        e
        for e in sink.named("RUN_FINISHED")
        if e.get("run_id") == run_id and e.get("trace_id") == run["trace_id"]
    ]
    assert started["trace_id"] == finished["trace_id"] == run["trace_id"]
    # the journaled actions (the spend, the fetch) carry the trace id of the run that made them
    assert sorted(a["capability"] for a in actions) == ["http_fetch", "spend"]
    assert {a["trace_id"] for a in actions} == {run["trace_id"]}
    # the node's own log lines written inside a run of `once` (its park) name that run's trace
    once = [r for r in lines.records if getattr(r, "agent", "") == "once"]
    in_runs = [r.trace_id for r in once if hasattr(r, "trace_id")]
    once_runs = [r for r in receiver.named("agent.") if r["attributes"]["agent"] == "once"]
    assert in_runs and set(in_runs) <= {r["trace_id"] for r in once_runs}  # a tick's, a task's


async def test_an_agents_log_lines_carry_the_trace_id_of_their_run(
    aiohttp_client, aiohttp_server, tmp_path, built_agents
):
    """`hello` logs a line (host log) and prints one (stdout) each tick: with tracing on, each
    journaled `log` event names the trace of the tick that wrote it (the span the receiver
    got); with tracing off, none has a trace id (the field is absent, as before)."""
    receiver = Receiver()
    hello = agent_toml("hello", built_agents["hello"], "tick_interval_ms = 60000")
    traced = await collecting(aiohttp_server, receiver)
    try:
        app, client, _ = await start_node(aiohttp_client, tmp_path, traced + hello)
        (tick,) = await until(lambda: receiver.named("agent.tick"), 15, "the first tick's span")
        logs = await until(lambda: two(journal(app, "hello", "log")), 15, "the tick's two lines")
        view = await entries(client, "logs")
    finally:
        await client.close()
        tracing.stop()
    assert {(e["message"], e.get("stream")) for e in logs} == {
        ("hello from a wasm agent", None),
        ("hello on stdout", "stdout"),
    }
    assert {e["trace_id"] for e in logs} == {tick["trace_id"]}
    # the logs view shows it too
    assert {(e["message"], e["trace_id"]) for e in view if e["agent"] == "hello"} == {
        ("hello from a wasm agent", tick["trace_id"]),
        ("hello on stdout", tick["trace_id"]),
    }

    (tmp_path / "off").mkdir()
    app, client, _ = await start_node(aiohttp_client, tmp_path / "off", hello)
    try:
        untraced = await until(lambda: two(journal(app, "hello", "log")), 15, "two lines, untraced")
        view = await entries(client, "logs")
    finally:
        await client.close()
    assert not [e for e in untraced if "trace_id" in e]
    assert [e["trace_id"] for e in view if e["agent"] == "hello"] == [None, None]


async def test_a_finding_an_agent_reports_names_the_trace_of_its_run_in_the_findings_view(
    aiohttp_client, aiohttp_server, tmp_path, built_agents
):
    """`payer` without the `spend` capability reports a finding on its tick: the finding's
    event and `GET /api/v1/findings` name that tick's trace; one an operator posts, none."""
    receiver = Receiver()
    payer = agent_toml("payer", built_agents["payer"], "tick_interval_ms = 60000")
    config = await collecting(aiohttp_server, receiver) + payer
    try:
        app, client, _ = await start_node(aiohttp_client, tmp_path, config)
        (tick,) = await until(lambda: receiver.named("agent.tick"), 15, "the first tick's span")
        (event,) = await until(lambda: journal(app, "payer", "finding"), 15, "the finding")
        posted = {"agent": "payer", "severity": "low", "title": "checked", "detail": "by hand"}
        response = await client.post("/api/v1/findings", json=posted, headers=auth(OPERATE_TOKEN))
        assert response.status == 201, await response.text()
        view = await entries(client, "findings")
    finally:
        await client.close()
        tracing.stop()
    assert event["title"] == "spend not permitted" and event["trace_id"] == tick["trace_id"]
    assert [(f["title"], f["trace_id"]) for f in view if f["agent"] == "payer"] == [
        ("spend not permitted", tick["trace_id"]),
        ("checked", None),
    ]


async def entries(client, kind: str) -> list[dict]:
    """Every entry of the logs or the findings view, oldest first."""
    response = await client.get(f"/api/v1/{kind}?limit=1000", headers=auth(READ_TOKEN))
    assert response.status == 200, await response.text()
    return (await response.json())[kind]
