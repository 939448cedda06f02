"""Budgets shared by a named group of agents or by the node (node/policy/budgets.py): one
ledger, folded from the journals, that requests of every agent it covers spend together, so
"20 a day for group payers" stops exactly at 20 whichever of the group's agents ask, however
many at once; an agent outside the group is not within it; the config names the groups."""

from __future__ import annotations

import asyncio

import pytest

from node.config.model import ConfigError
from node.context import CONTEXT
from node.policy.policyset import load_policy_set
from node.services.approvals import APPROVALS
from projections.approvals import Approvals
from tests.policy_support import POLICY_TOML, payment, write_policy
from tests.polling import until
from tests.support import make_config

SHARED = """
@id("team")
@budget("amount 20 per day for group payers")
permit (principal, action == Action::"spend", resource)
when { context.request.payee == "acme" };

@id("house")
@budget("amount 30 per day for node")
permit (principal, action == Action::"spend", resource)
when { context.request.payee == "globex" };
"""
GROUPS = '\n[agent_groups]\npayers = ["payer", "other"]\n'


@pytest.fixture
def config(tmp_path):
    write_policy(tmp_path, SHARED)
    return make_config(tmp_path, POLICY_TOML + GROUPS)


def ask(client, request, agent):
    return client.app[APPROVALS].ask(agent, "spend", request, None, None, policy=True)


async def test_a_group_budget_is_spent_by_its_agents_together_and_stops_at_its_limit(client):
    gate = client.app[APPROVALS]
    asking = [
        asyncio.create_task(ask(client, payment(3, invoice=f"i-{n}"), ("payer", "other")[n % 2]))
        for n in range(24)
    ]
    await until(
        lambda: sum(t.done() for t in asking) + gate.projection.count == 24,
        what="every request permitted or pending",
    )
    permitted = [t.result() for t in asking if t.done()]
    for waiting in asking:
        waiting.cancel()
    assert len(permitted) == 6  # 18 of 20: 3 more would pass it
    assert all(v.operator == "policy:team" for v in permitted)
    asked = gate.projection.list()
    assert len(asked) == 18
    assert all("shared by group payers" in r.policy.reason for r in asked), asked[0].policy
    approvals, store = client.app[CONTEXT].projections.get(Approvals), client.app[CONTEXT].store
    through = store.last_position
    for agent in ("payer", "other"):  # one ledger, whichever agent reads it
        assert approvals.spent(agent, "spend", "team", 0, through, "group:payers") == 18
    assert approvals.spent("payer", "spend", "team", 0, through) == 0  # no per-agent ledger
    # exactly to the limit: 2 more fit, from either agent, then nothing
    assert (await ask(client, payment(2, invoice="last"), "other")).outcome == "approve"
    task = asyncio.create_task(ask(client, payment(0.5, invoice="over"), "payer"))
    over = await until(lambda: [r for r in gate.projection.list() if "over" in r.request])
    assert over[0].policy.reason.endswith("20 spent, 0.5 more would pass 20")
    task.cancel()
    # an agent outside the group is not within the group's budget: people decide
    outsider = asyncio.create_task(ask(client, payment(1, invoice="outside"), "third"))
    found = await until(lambda: [r for r in gate.projection.list() if "outside" in r.request])
    assert "which third is not in ([agent_groups] payers)" in found[0].policy.reason
    outsider.cancel()


async def test_a_node_budget_is_shared_by_every_agent(client):
    verdicts = [
        await ask(client, payment(10, "globex", invoice=f"g-{n}"), agent)
        for n, agent in enumerate(("payer", "other", "third"))
    ]
    assert [v.outcome for v in verdicts] == ["approve"] * 3
    gate = client.app[APPROVALS]
    task = asyncio.create_task(ask(client, payment(1, "globex", invoice="g-4"), "fourth"))
    waiting = await until(lambda: gate.projection.list())
    assert "shared by node" in waiting[0].policy.reason
    assert waiting[0].policy.reason.endswith("30 spent, 1 more would pass 30")
    task.cancel()


def test_a_budget_of_an_unknown_group_is_refused(tmp_path):
    write_policy(tmp_path, SHARED.replace("group payers", "group nobody"))
    with pytest.raises(ConfigError, match="group 'nobody', which \\[agent_groups\\] does not"):
        load_policy_set(make_config(tmp_path, POLICY_TOML + GROUPS))
