"""A decision made through the A2A or AG-UI door is acknowledged only once the write is held
where the REST API's would be (for a placed agent: the mesh's stream, within the lease). The
node's acknowledgement step (TaskService.confirm, which placement sets) is made to refuse here
as it does when the stream does not acknowledge in time: the client is told, never a success."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from node.services.tasks import TASKS
from node.web.http import Problem
from projections.approvals import Approvals
from tests.polling import until
from tests.protocol_support import cashier_toml, start_node, started
from tests.protocols.test_protocol_agui import run, run_input
from tests.support import OPERATE_TOKEN, auth

REFUSAL = "'cashier': the write was not acknowledged by the mesh's stream before the lease ended"


@pytest.fixture
async def node(aiohttp_server, tmp_path, built_agents):
    node = await start_node(
        aiohttp_server, tmp_path, cashier_toml("cashier", built_agents["cashier"])
    )
    await started(node, "cashier")
    return node


def refuse_acknowledgements(node) -> list[str]:
    """From now on every acknowledgement is refused, as a stream that lapsed refuses it."""
    asked: list[str] = []

    async def confirm(agent: str) -> None:
        asked.append(agent)
        raise Problem(503, REFUSAL)

    node.app[TASKS].confirm = confirm
    return asked


async def test_an_a2a_decision_not_acknowledged_is_an_error(node):
    async with httpx.AsyncClient(headers=auth(OPERATE_TOKEN), timeout=30) as http:
        created = await http.post(
            f"{node.url}/api/v1/a2a/tasks",
            json={"from": "operator", "to": "cashier", "input": {"pay": {"invoice": "INV-7"}}},
        )
        task_id = created.json()["id"]
        await until(node.ctx.projections.get(Approvals).list, 20, "the payment waits")
        asked = refuse_acknowledgements(node)
        message = {
            "messageId": "m1",
            "role": "ROLE_USER",
            "taskId": task_id,
            "parts": [{"text": "approve"}],
        }
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
        answer = (
            await http.post(
                f"{node.url}/a2a/cashier",
                content=json.dumps(body),
                headers={"Content-Type": "application/json"},
            )
        ).json()
    assert asked == ["cashier"]
    assert "result" not in answer and REFUSAL in answer["error"]["message"]


async def test_an_agui_resume_not_acknowledged_ends_in_an_error(node):
    thread = str(uuid.uuid4())
    await run(node, "cashier", run_input(thread, "pay INV-0079"))
    (approval,) = node.ctx.projections.get(Approvals).list()
    asked = refuse_acknowledgements(node)
    resume = [{"interruptId": approval.id, "status": "resolved"}]
    resumed = await run(node, "cashier", run_input(thread, "pay INV-0079", resume=resume))
    assert asked == ["cashier"]
    errors = [e for e in resumed if e["type"] == "RUN_ERROR"]
    assert errors and REFUSAL in errors[0]["message"]
    assert not [e for e in resumed if e["type"] == "RUN_FINISHED"]
