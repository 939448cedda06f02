"""Inference gated like any capability: people see what a call may cost before it is made, and
Cedar policies judge it by its model, max_tokens and estimated cost (the built-in request
fields of `inference`): a cheap model goes through, an expensive one asks people."""

from __future__ import annotations

import json

from node.inference.models import cost_bound
from tests.inference.test_inference_node import ANSWER, helper_node, outcome
from tests.policy_support import write_policy
from tests.polling import until
from tests.runtime.test_lifecycle import create_task
from tests.runtime.test_runtime_node import decide, journal
from tests.support import READ_TOKEN, auth

POLICY = """
@id("cheap-models")
permit (principal, action == Action::"inference", resource)
when {
  context.request.model == "small" &&
  context.request.estimated_cost.lessThanOrEqual(decimal("0.01"))
};
"""


def gated(rule: str) -> str:
    return f"""[agents.capabilities]
inference = true
[agents.approval]
inference = {rule}
[agents.inference]
models = ["small", "claude"]
"""


async def test_a_gated_call_shows_its_model_and_most_cost_and_waits(
    aiohttp_client, tmp_path, built_agents, llm
):
    llm.script(ANSWER)
    app, client, _ = await helper_node(
        aiohttp_client, tmp_path, built_agents, llm, agent=gated("true")
    )
    task_id = await create_task(client, {"question": "hi"}, to="helper")
    listed = await until(
        lambda: journal(app, "helper", "approval.requested"), 15, "the call waits for people"
    )
    shown = json.loads(listed[0]["request"])
    assert shown["model"] == "small" and shown["provider_model"] == "small-1"
    assert shown["max_tokens"] == 256 and shown["tools"] == ["invoice_total", "add"]
    # at most: the estimated prompt at 1.5 and 256 output tokens at 6.0 per million, rounded up
    most = shown["estimated_input_tokens"] * 1500 + 256 * 6000
    assert shown["estimated_cost"] == cost_bound(most) and 0.0015 < cost_bound(most) < 0.01
    assert llm.asked == []  # nothing was asked of the model before the approval
    await decide(client, "approve")
    done = await until(lambda: journal(app, "helper", "task.completed"), 15, "answered")
    assert done[0]["id"] == task_id and done[0]["output"]["answer"] == "INV-2 totals 80."


async def test_a_policy_lets_a_cheap_model_through_and_asks_people_for_an_expensive_one(
    aiohttp_client, tmp_path, built_agents, llm
):
    write_policy(tmp_path, POLICY)
    llm.script(ANSWER)
    app, client, _ = await helper_node(
        aiohttp_client,
        tmp_path,
        built_agents,
        llm,
        agent=gated('"policy"'),
        extra="",
        policy='[policy]\nfiles = ["policies.cedar"]\n',
    )
    cheap = await outcome(app, client, {"question": "hi"})
    assert cheap["type"] == "task.completed", cheap
    decided = journal(app, "helper", "approval.decided")
    assert decided[0]["decision"] == "approve" and "cheap-models" in json.dumps(decided[0])

    task_id = await create_task(client, {"question": "hi", "model": "claude"}, to="helper")

    async def pending() -> list:
        response = await client.get("/api/v1/approvals", headers=auth(READ_TOKEN))
        return [a for a in await response.json() if a["capability"] == "inference"]

    waiting = await until(pending, 15, "the expensive model waits for people")
    assert json.loads(waiting[0]["request"])["model"] == "claude"
    await decide(client, "deny", "too expensive")
    failed = await until(lambda: journal(app, "helper", "task.failed"), 15, "denied")
    assert failed[0]["id"] == task_id and "too expensive" in failed[0]["error"]
    assert len(llm.asked) == 1  # only the cheap call reached a model
