"""Traces: with `[tracing] enabled`, a node sends OpenTelemetry spans over OTLP/HTTP to a real
receiver (an aiohttp server here, decoding the protobuf with opentelemetry-proto): the run, the
inference call under it with the GenAI attributes, the approval wait; the trace id is in the
run's events and in the journaled call."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from node.ops import tracing
from tests.inference.test_inference_node import ANSWER, TOOL_ROUND, helper_node, outcome
from tests.polling import until
from tests.runtime.test_runtime_node import journal


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


def two(spans: list) -> list | None:
    return spans if len(spans) == 2 else None


async def test_runs_and_inference_are_spans_with_the_genai_attributes(
    aiohttp_client, aiohttp_server, tmp_path, built_agents, llm
):
    receiver = Receiver()
    app_ = web.Application()
    app_.router.add_post("/v1/traces", receiver.traces)
    collector = await aiohttp_server(app_)
    tracing_toml = f"""
[tracing]
enabled = true
endpoint = "http://127.0.0.1:{collector.port}/v1/traces"
service_name = "node-under-test"
export_interval_ms = 50
"""
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
