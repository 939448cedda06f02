"""AG-UI 1.0 runs: POST /agui/{agent} with a RunAgentInput, AG-UI events back over SSE.

Every event is validated with the `ag-ui-protocol` models; the official `@ag-ui/client`
HttpAgent (node, tests/js) completes a run, an interrupt and its resume; bad resumes and bad
bodies get AG-UI's or HTTP's answer, never a 500.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from ag_ui.core import Event as AguiEvent
from ag_ui.core import RunAgentInput
from pydantic import TypeAdapter

from node.services.approvals import APPROVALS
from projections.approvals import Approvals
from tests.polling import until
from tests.protocol_support import (
    cashier_toml,
    start_node,
    started,
)
from tests.support import OPERATE_TOKEN, READ_TOKEN, auth

EVENT = TypeAdapter(AguiEvent)
JS_DIR = Path(__file__).resolve().parent.parent / "js"


@pytest.fixture
async def node(aiohttp_server, tmp_path, built_agents):
    toml = cashier_toml("cashier", built_agents["cashier"]) + cashier_toml(
        "hasty", built_agents["cashier"], timeout=1
    )
    node = await start_node(aiohttp_server, tmp_path, toml)
    await started(node, "cashier", "hasty")
    return node


def run_input(thread: str, text: str | None = None, **extra: Any) -> dict[str, Any]:
    messages = [] if text is None else [{"id": str(uuid.uuid4()), "role": "user", "content": text}]
    body = {
        "threadId": thread,
        "runId": str(uuid.uuid4()),
        "state": {},
        "messages": messages,
        "tools": [],
        "context": [],
        "forwardedProps": {},
        **extra,
    }
    RunAgentInput.model_validate(body)  # what we send is a valid RunAgentInput
    return body


async def run(node, agent: str, body: Any, token: str = OPERATE_TOKEN) -> list[dict]:
    """POST a run; every `data:` frame, each validated as an AG-UI event."""
    events = []
    async with (
        httpx.AsyncClient(timeout=30) as http,
        http.stream(
            "POST",
            f"{node.url}/agui/{agent}",
            json=body,
            headers={**auth(token), "Accept": "text/event-stream"},
        ) as response,
    ):
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                model = EVENT.validate_python(event)
                assert model.type.value == event["type"]
                events.append(event)
    return events


def types(events: list[dict]) -> list[str]:
    return [e["type"] for e in events]


def finished(events: list[dict]) -> dict:
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    return events[-1]


async def test_a_user_message_runs_a_task_and_a_bare_run_runs_a_tick(node):
    thread = str(uuid.uuid4())
    body = run_input(thread, "hello there")
    events = await run(node, "cashier", body)
    assert types(events) == [
        "RUN_STARTED",
        "CUSTOM",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]
    assert events[0]["threadId"] == thread and events[0]["runId"] == body["runId"]
    assert events[1]["name"] == "agent-node.task_progress"
    assert events[3]["delta"] == "cashier heard: hello there"
    end = finished(events)
    assert end["outcome"] == {"type": "success"}
    assert end["result"] == {"reply": "cashier heard: hello there"}
    assert end["threadId"] == thread and end["runId"] == body["runId"]

    # the run's task is the task every other API shows; its A2A context is the thread
    (created,) = node.journal("cashier", "task.created")
    assert created["from"] == "operator" and created["input"] == {"text": "hello there"}
    async with httpx.AsyncClient(headers=auth(READ_TOKEN)) as http:
        rest = (await http.get(f"{node.url}/api/v1/a2a/tasks/{created['id']}")).json()
        a2a = (
            await http.post(
                f"{node.url}/a2a/cashier",
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "GetTask",
                    "params": {"id": created["id"]},
                },
            )
        ).json()["result"]
    assert rest["status"] == "completed"
    assert a2a["contextId"] == thread and a2a["status"]["state"] == "TASK_STATE_COMPLETED"
    assert a2a["history"][0]["parts"] == [{"text": "hello there"}]

    tick = await run(node, "cashier", run_input(thread))
    assert types(tick) == [
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]
    assert tick[2]["delta"] == "cashier: nothing to pay"
    assert finished(tick)["outcome"] == {"type": "success"}


async def test_an_approval_gate_interrupts_the_run_and_resume_decides_it(node):
    thread = str(uuid.uuid4())
    events = await run(node, "cashier", run_input(thread, "pay INV-0077"))
    assert types(events) == [
        "RUN_STARTED",
        "CUSTOM",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "RUN_FINISHED",
    ]
    (approval,) = node.ctx.projections.get(Approvals).list()
    assert events[2]["toolCallName"] == "spend"
    assert json.loads(events[3]["delta"]) == {"invoice": "INV-0077"}
    outcome = finished(events)["outcome"]
    assert outcome["type"] == "interrupt"
    (interrupt,) = outcome["interrupts"]
    assert interrupt["id"] == approval.id and interrupt["reason"] == "approval"
    assert interrupt["toolCallId"] == events[2]["toolCallId"]
    assert interrupt["expiresAt"] == approval.expires_at
    assert "spend" in interrupt["message"] and "INV-0077" in interrupt["message"]
    # the operator is shown the whole request the agent will perform, and its hash
    assert interrupt["metadata"]["request"] == approval.request
    assert approval.request in interrupt["message"]
    assert interrupt["metadata"]["requestHash"] == approval.request_hash

    resume = [{"interruptId": approval.id, "status": "resolved"}]
    resumed = await run(node, "cashier", run_input(thread, "pay INV-0077", resume=resume))
    # the task was parked at its spend (docs/agents.md, "A task waiting for people"): its
    # resumed run says its progress before the spend again, then the spend's result
    assert types(resumed) == [
        "RUN_STARTED",
        "CUSTOM",
        "TOOL_CALL_RESULT",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]
    assert resumed[1]["value"]["progress"] == events[1]["value"]["progress"]
    assert resumed[2]["toolCallId"] == interrupt["toolCallId"]
    assert json.loads(resumed[2]["content"])["capability"] == "spend"
    end = finished(resumed)
    assert end["outcome"] == {"type": "success"} and end["result"]["paid"] is True
    decided = node.journal("cashier", "approval.decided")
    assert decided == [
        {
            "type": "approval.decided",
            "id": approval.id,
            "decision": "approve",
            "operator": "operator",
            "request_hash": approval.request_hash,
        }
    ]
    assert len(node.journal("cashier", "task.created")) == 1  # resuming made no new task

    # "cancelled" is the operator's deny
    denied = await run(node, "cashier", run_input(thread, "pay INV-0078"))
    second = finished(denied)["outcome"]["interrupts"][0]
    cancel = [{"interruptId": second["id"], "status": "cancelled"}]
    after = await run(node, "cashier", run_input(thread, "pay INV-0078", resume=cancel))
    assert types(after)[:2] == ["RUN_STARTED", "TOOL_CALL_RESULT"]
    assert json.loads(after[1]["content"])["decision"] == "deny"
    assert finished(after)["result"]["paid"] is False
    assert node.journal("cashier", "approval.decided")[-1]["decision"] == "deny"


async def test_a_tick_that_asks_for_approval_is_interrupted_and_resumed(
    aiohttp_server, tmp_path, built_agents
):
    """The payer pays an invoice every tick; a run without a user message is one tick."""
    node = await start_node(aiohttp_server, tmp_path, cashier_toml("payer", built_agents["payer"]))
    (startup,) = await until(lambda: node.ctx.projections.get(Approvals).list())
    await node.app[APPROVALS].decide(startup.id, "approve", "admin")  # its first tick
    await until(lambda: node.journal("payer", "action.performed"))
    # that tick ends with a log line; a run started before it lands would take it as its own
    await until(lambda: node.journal("payer", "log"))
    thread = str(uuid.uuid4())
    events = await run(node, "payer", run_input(thread))
    assert types(events) == [
        "RUN_STARTED",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "RUN_FINISHED",
    ]
    (interrupt,) = finished(events)["outcome"]["interrupts"]
    assert json.loads(events[2]["delta"])["invoice"] == "INV-0002"
    resumed = await run(
        node,
        "payer",
        run_input(thread, resume=[{"interruptId": interrupt["id"], "status": "resolved"}]),
    )
    assert types(resumed) == [
        "RUN_STARTED",
        "TOOL_CALL_RESULT",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]
    assert resumed[3]["delta"].startswith("paid INV-0002")
    assert finished(resumed)["outcome"] == {"type": "success"}


async def test_bad_resumes_and_bad_bodies(node):
    thread = str(uuid.uuid4())
    # an interrupt nobody raised: skipped with a warning, the run still succeeds
    unknown = await run(
        node,
        "cashier",
        run_input(thread, resume=[{"interruptId": "no-such-interrupt", "status": "resolved"}]),
    )
    assert types(unknown) == ["RUN_STARTED", "CUSTOM", "RUN_FINISHED"]
    assert unknown[1]["name"] == "agent-node.warning"
    assert unknown[1]["value"]["code"] == "UNKNOWN_INTERRUPT"

    # an interrupt that expired (timeout 1 s) cannot be answered, only abandoned
    events = await run(node, "hasty", run_input(thread, "pay INV-9"))
    interrupt = finished(events)["outcome"]["interrupts"][0]
    await until(lambda: node.journal("hasty", "approval.timed_out"))
    stale = await run(
        node,
        "hasty",
        run_input(thread, resume=[{"interruptId": interrupt["id"], "status": "resolved"}]),
    )
    assert types(stale) == ["RUN_ERROR"]
    assert stale[0]["code"] == "INTERRUPT_EXPIRED" and interrupt["id"] in stale[0]["message"]
    assert not node.journal("hasty", "approval.decided")
    abandoned = await run(
        node,
        "hasty",
        run_input(thread, resume=[{"interruptId": interrupt["id"], "status": "cancelled"}]),
    )
    assert finished(abandoned)["outcome"] == {"type": "success"}
    assert finished(abandoned)["result"]["paid"] is False  # the agent saw the timeout

    # a decided interrupt answered again: a warning, no second decision
    again = await run(
        node,
        "hasty",
        run_input(thread, resume=[{"interruptId": interrupt["id"], "status": "cancelled"}]),
    )
    assert finished(again)["outcome"] == {"type": "success"}
    interrupt_of_cashier = finished(await run(node, "cashier", run_input(thread, "pay X")))
    cashier_id = interrupt_of_cashier["outcome"]["interrupts"][0]["id"]
    elsewhere = await run(
        node, "hasty", run_input(thread, resume=[{"interruptId": cashier_id, "status": "resolved"}])
    )
    assert elsewhere[1]["value"]["code"] == "UNKNOWN_INTERRUPT"  # not hasty's interrupt
    assert node.ctx.projections.get(Approvals).get(cashier_id) is not None  # still pending

    async with httpx.AsyncClient(timeout=10) as http:

        async def post(body: Any, agent: str = "cashier", token: str = OPERATE_TOKEN):
            raw = body if isinstance(body, bytes) else json.dumps(body).encode()
            return await http.post(
                f"{node.url}/agui/{agent}",
                content=raw,
                headers={**auth(token), "Content-Type": "application/json"},
            )

        for bad in (
            b"{nope",
            b"[]",
            json.dumps({"runId": "r"}).encode(),
            json.dumps({"threadId": 1, "runId": "r"}).encode(),
            json.dumps(
                {"threadId": "t", "runId": "r", "resume": [{"interruptId": "x", "status": "maybe"}]}
            ).encode(),
            json.dumps({"threadId": "t", "runId": "r", "messages": "hi"}).encode(),
        ):
            response = await post(bad)
            assert response.status_code == 400, (bad, response.text)
            assert response.headers["content-type"].startswith("application/problem+json")
        assert (await post(run_input(thread), agent="nobody")).status_code == 404
        assert (await post(run_input(thread), token=READ_TOKEN)).status_code == 403
        assert (
            await http.post(f"{node.url}/agui/cashier", json=run_input(thread))
        ).status_code == 401


def _npm_ready() -> bool:
    return shutil.which("node") is not None and (JS_DIR / "node_modules" / "@ag-ui").is_dir()


async def test_official_ag_ui_client_runs_interrupts_and_resumes(node):
    """tests/js/agui-run.mjs drives the node with @ag-ui/client's HttpAgent."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    if not _npm_ready():
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"],
            cwd=JS_DIR,
            check=True,
            capture_output=True,
            timeout=300,
        )
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(JS_DIR / "agui-run.mjs"),
        f"{node.url}/agui/cashier",
        OPERATE_TOKEN,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, stderr.decode()
    report = json.loads(stdout)
    assert report["first"]["outcome"] == "success"
    assert report["first"]["text"] == "cashier heard: hello from the AG-UI client"
    assert report["interrupted"]["outcome"] == "interrupt"
    (interrupt,) = report["interrupted"]["interrupts"]
    assert interrupt["reason"] == "approval" and interrupt["toolCallId"]
    assert report["pendingAfterInterrupt"] == [interrupt["id"]]
    assert report["resumed"]["outcome"] == "success"
    assert report["resumed"]["result"]["paid"] is True
    assert report["pendingAfterResume"] == []
    assert report["warnings"] == []
    decided = node.journal("cashier", "approval.decided")
    assert [(d["id"], d["decision"], d["operator"]) for d in decided] == [
        (interrupt["id"], "approve", "operator")
    ]
