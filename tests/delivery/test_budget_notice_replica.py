"""An inference budget's crossing is announced once, by the home of the journal that holds it,
never again by a replica that folds the same finding (issue 54): two real nodes in this
process with the same `ops` channel, the agent's journal replicated from its home (node-a) to
node-b with real signatures. node-a tells the crossing (node/inference/notices.py: a finding
with its incident key in the agent's journal) and its outbox sends it; node-b's outbox folds
the replicated finding into a lane it keeps parked (not its journal: node/delivery/dispatch.py
`is_home`), then forgets it once node-a's `delivery.progress` says it was delivered; after
node-b takes the journal over, nothing is sent again."""

from __future__ import annotations

import time

from node.context import CONTEXT
from node.delivery.service import OUTBOX
from node.inference.notices import BudgetNotices, Crossing
from node.policy.budgets import parse_budget
from projections import catalogue as c
from projections.entries import Findings
from tests.delivery.pair import placed_pair
from tests.delivery.support import start_receiver
from tests.inference.test_inference_budgets import channel
from tests.polling import until
from tests.protocol_support import agent_toml

RULE = "tokens 135 per day"


async def test_a_budget_crossing_is_told_once_by_its_journals_home_not_by_a_replica(
    aiohttp_server, tmp_path, built_agents
):
    receiver = await start_receiver(aiohttp_server)
    worker = agent_toml("worker", built_agents["task_worker"])
    ops = channel(receiver.url)  # the same channel on both nodes, as a mesh configures it
    app_a, server_a, app_b = await placed_pair(aiohttp_server, tmp_path, "worker", worker, ops)
    a, b = app_a[CONTEXT], app_b[CONTEXT]

    # node-a's agent took its budget past 80 %: node-a tells it, in the agent's journal
    notices = BudgetNotices(a.store, a.projections.get(Findings), a.name)
    await notices.report(Crossing(parse_budget(RULE), 80, "worker", time.time()))
    await receiver.wait_for(1, "/budgets")

    def replica(kind: str) -> list:
        return [e for e in b.store.iter_stream("worker") if e.event.type == kind]

    (finding,) = await until(lambda: replica(c.FINDING), 30, "the finding, replicated")
    incident = finding.event.data["incident"]
    assert incident.startswith("worker/inference-budget/80/")
    lane = f"budget/{incident}/ops"
    # node-b folded it into its outbox and keeps the lane parked: the journal is node-a's
    await until(lambda: app_b[OUTBOX].book.lane(lane), 10, "node-b's outbox folds the finding")
    assert len(receiver.at("/budgets")) == 1
    await until(lambda: replica(c.DELIVERY_PROGRESS), 15, "node-a's delivery, replicated")
    folded = b.store.last_position
    await until(lambda: app_b[OUTBOX].ingester.cursor >= folded, 10, "node-b folds the progress")
    assert app_b[OUTBOX].book.pending_count() == 0  # told by node-a: forgotten here

    # node-a is gone and node-b takes the journal over: the crossing is not told again
    await server_a.close()
    takeover = c.JournalTakeover(epoch=1, lease_revision=1, previous_home="node-a")
    await b.store.append("worker", *c.event_of(takeover))
    await b.store.append("worker", "log", {"level": "info", "message": "a later write"})
    end = b.store.last_position
    await until(lambda: app_b[OUTBOX].ingester.cursor >= end, 10, "node-b folds the takeover")
    assert app_b[OUTBOX].book.pending_count() == 0
    assert len(receiver.at("/budgets")) == 1
    # and node-b journaled no finding of its own: only the node whose agent crossed tells it
    found = [e.stream for e in b.store.read_all(0, 10_000) if e.event.type == c.FINDING]
    assert found == ["worker"]
