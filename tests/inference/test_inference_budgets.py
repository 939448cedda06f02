"""Inference budgets on the node's one budget mechanism: an agent's own and a group's shared
budget stop exactly at their limits (every call takes what it was estimated at), survive a
restart (the ledger is the journal's fold), report findings at 80 % and 100 % and send them to
the notification channels (a real receiver, the signature checked with `standardwebhooks`),
once per window also after a restart, and a budget with `over = "ask"` asks people instead of
refusing."""

from __future__ import annotations

import base64
import json
import time

from standardwebhooks.webhooks import Webhook

from node.context import CONTEXT
from node.inference.notices import BudgetNotices, Crossing
from node.policy.budgets import parse_budget
from projections.entries import Findings
from tests.delivery.support import DELIVERY_TOML, start_receiver
from tests.llm_support import Reply
from tests.polling import until
from tests.runtime.test_runtime_node import agent_toml, decide, journal, start_node

# agents/inference asks with a 51-character prompt and max_tokens 32: at most 13 + 32 = 45
# tokens a call; the server counts exactly that, so 3 calls fill a budget of 135
EXACT = Reply(text=["ok"], input_tokens=13, output_tokens=32)
SECRET = "whsec_" + base64.b64encode(b"b" * 32).decode()
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


def channel(url: str) -> str:
    return f"""{DELIVERY_TOML}
[[notifications.channels]]
name = "ops"
kind = "webhook"
url = "{url}/budgets"
secret = "{SECRET}"
"""


async def node(
    aiohttp_client,
    tmp_path,
    built_agents,
    llm,
    budget,
    names=("thinker",),
    over="refuse",
    extra="",
):
    llm.default = EXACT
    text = toml(llm.port, budget, names, over) + extra
    for name in names:
        text += agent_toml(name, built_agents["inference"], THINKER)
    return await start_node(aiohttp_client, tmp_path, text)


def completed(app, names) -> int:
    return sum(len(journal(app, n, "inference.completed")) for n in names)


def refused(app, name) -> list[dict]:
    return [e for e in journal(app, name, "inference.failed") if e["refused"]]


async def test_an_agents_budget_stops_exactly_at_its_limit_and_survives_a_restart(
    aiohttp_client, aiohttp_server, tmp_path, built_agents, llm
):
    receiver = await start_receiver(aiohttp_server)
    rule, told = "tokens 135 per day", channel(receiver.url)
    app, client, _ = await node(aiohttp_client, tmp_path, built_agents, llm, rule, extra=told)
    first = (await until(lambda: refused(app, "thinker"), 20, "the budget refuses a call"))[0]
    assert completed(app, ["thinker"]) == 3 and len(llm.asked) == 3
    assert "inference budget 'tokens 135 per day': 0 tokens left" in first["error"]
    assert "this call may take 45 tokens" in first["error"]
    titles = [f["title"] for f in journal(app, "thinker", "finding")]
    assert titles == [
        "inference budget 'tokens 135 per day' is 80 % spent",
        "inference budget 'tokens 135 per day' is 100 % spent",
    ]
    # the same two, through the channel: signed webhooks, in order
    await receiver.wait_for(2, "/budgets")
    sent = [Webhook(SECRET).verify(r.body, r.headers) for r in receiver.at("/budgets")]
    assert [m["type"] for m in sent] == ["inference.budget"] * 2
    assert [m["data"]["title"] for m in sent] == titles
    assert {m["data"]["agent"] for m in sent} == {"thinker"} and sent[1]["data"][
        "severity"
    ] == "high"
    before = len(refused(app, "thinker"))
    await client.close()
    app2, client2, _ = await node(aiohttp_client, tmp_path, built_agents, llm, rule, extra=told)
    await until(lambda: len(refused(app2, "thinker")) > before or None, 20, "refused again")
    assert len(llm.asked) == 3  # nothing more after the restart: the ledger held
    # the restarted node asked to tell the same crossing again: its journal says it was told
    ctx = app2[CONTEXT]
    notices = BudgetNotices(ctx.store, ctx.projections.get(Findings), ctx.name)
    for share in (80, 100):
        await notices.report(Crossing(parse_budget(rule), share, "thinker", time.time()))
    assert [f["title"] for f in journal(app2, "thinker", "finding")] == titles
    await ctx.store.append("thinker", "log", {"level": "info", "message": "a later write"})
    await until(lambda: _outbox_past(app2), 10, "the outbox folded the journal's end")
    assert len(receiver.at("/budgets")) == 2
    await client2.close()


def _outbox_past(app) -> bool:
    from node.delivery.service import OUTBOX

    ctx = app[CONTEXT]
    return app[OUTBOX].ingester.cursor >= ctx.store.last_position


async def test_a_groups_budget_is_shared_and_stops_exactly_at_its_limit(
    aiohttp_client, tmp_path, built_agents, llm
):
    names = ("thinker", "other")
    app, _, _ = await node(
        aiohttp_client, tmp_path, built_agents, llm, "tokens 225 per hour for group pair", names
    )
    await until(lambda: refused(app, "thinker") and refused(app, "other"), 20, "both refused")
    assert completed(app, names) == 5 and len(llm.asked) == 5  # 5 x 45 = 225, shared
    # a shared budget is told once, in the node's own journal, naming the member that crossed
    told = journal(app, app[CONTEXT].name, "finding")
    assert [f["title"].split(" is ")[1] for f in told] == ["80 % spent", "100 % spent"]
    assert {f["subject"] for f in told} <= set(names)
    assert not [f for n in names for f in journal(app, n, "finding")]


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
