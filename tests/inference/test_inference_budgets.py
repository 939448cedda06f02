"""Inference budgets on the node's one budget mechanism: an agent's own and a group's shared
budget stop exactly at their limits (every call takes what it was estimated at), survive a
restart (the ledger is the journal's fold), report findings at 80 % and 100 %, and a budget
with `over = "ask"` asks people instead of refusing."""

from __future__ import annotations

import json

from tests.llm_support import Reply
from tests.polling import until
from tests.runtime.test_runtime_node import agent_toml, decide, journal, start_node

# agents/inference asks with a 51-character prompt and max_tokens 32: at most 13 + 32 = 45
# tokens a call; the server counts exactly that, so 3 calls fill a budget of 135
EXACT = Reply(text=["ok"], input_tokens=13, output_tokens=32)
THINKER = """tick_interval_ms = 50
[agents.capabilities]
inference = true
"""


def toml(port: int, budget: str, agents: tuple[str, ...] = ("thinker",), over: str = "refuse"):
    text = f"""
[agent_groups]
pair = ["thinker", "other"]

[inference]
local_url = "http://127.0.0.1:{port}/v1"

[[inference.budgets]]
rule = "{budget}"
over = "{over}"
"""
    return text


async def node(
    aiohttp_client, tmp_path, built_agents, llm, budget, names=("thinker",), over="refuse"
):
    llm.default = EXACT
    text = toml(llm.port, budget, names, over)
    for name in names:
        text += agent_toml(name, built_agents["inference"], THINKER)
    return await start_node(aiohttp_client, tmp_path, text)


def completed(app, names) -> int:
    return sum(len(journal(app, n, "inference.completed")) for n in names)


def refused(app, name) -> list[dict]:
    return [e for e in journal(app, name, "inference.failed") if e["refused"]]


async def test_an_agents_budget_stops_exactly_at_its_limit_and_survives_a_restart(
    aiohttp_client, tmp_path, built_agents, llm
):
    app, client, _ = await node(aiohttp_client, tmp_path, built_agents, llm, "tokens 135 per day")
    first = (await until(lambda: refused(app, "thinker"), 20, "the budget refuses a call"))[0]
    assert completed(app, ["thinker"]) == 3 and len(llm.asked) == 3
    assert "inference budget 'tokens 135 per day': 0 tokens left" in first["error"]
    assert "this call may take 45 tokens" in first["error"]
    titles = [f["title"] for f in journal(app, "thinker", "finding")]
    assert titles == [
        "inference budget 'tokens 135 per day' is 80 % spent",
        "inference budget 'tokens 135 per day' is 100 % spent",
    ]
    before = len(refused(app, "thinker"))
    await client.close()
    app2, _, _ = await node(aiohttp_client, tmp_path, built_agents, llm, "tokens 135 per day")
    await until(lambda: len(refused(app2, "thinker")) > before or None, 20, "refused again")
    assert len(llm.asked) == 3  # nothing more after the restart: the ledger held


async def test_a_groups_budget_is_shared_and_stops_exactly_at_its_limit(
    aiohttp_client, tmp_path, built_agents, llm
):
    names = ("thinker", "other")
    app, _, _ = await node(
        aiohttp_client, tmp_path, built_agents, llm, "tokens 225 per hour for group pair", names
    )
    await until(lambda: refused(app, "thinker") and refused(app, "other"), 20, "both refused")
    assert completed(app, names) == 5 and len(llm.asked) == 5  # 5 x 45 = 225, shared


async def test_a_budget_that_asks_people_lets_an_approved_call_past_it(
    aiohttp_client, tmp_path, built_agents, llm
):
    app, client, _ = await node(
        aiohttp_client, tmp_path, built_agents, llm, "tokens 10 per day", over="ask"
    )
    llm.default = EXACT
    asked = await until(lambda: journal(app, "thinker", "approval.requested"), 20, "asked")
    shown = json.loads(asked[0]["request"])
    assert shown["budget"] == "tokens 10 per day" and shown["left"] == "10" and llm.asked == []
    await decide(client, "approve")
    await until(lambda: journal(app, "thinker", "inference.completed"), 20, "answered")
