"""The deployed-agents read model: every lifecycle event folds to the agents the node runs, a
replay (or a checkpoint round trip) gives the same set, and events that do not fit the state,
or come from another journal than `$node`, change nothing."""

from __future__ import annotations

import pickle

from projections import catalogue as c
from projections.deployments import DeployedAgents
from tests.projections.envelopes import Journal, fold, refolded_snapshot

SHA = "sha256:" + "ab" * 32


def definition(version: str, **extra) -> c.AgentDefinition:
    limits = c.AgentLimits(
        tick_interval_ms=1000, fuel_per_tick=10, memory_limit_mb=64, tick_timeout_ms=1000
    )
    return c.AgentDefinition(
        component=f"registry:worker@{version}", sha256=SHA, limits=limits, **extra
    )


def add(journal: Journal, payload: c.Payload, stream: str = "$node") -> None:
    journal.add(stream, *c.event_of(payload))


def lifecycle_journal() -> Journal:
    journal = Journal()
    add(
        journal,
        c.AgentDeployed(agent="w", revision=1, source="api", definition=definition("1.0.0")),
    )
    add(
        journal,
        c.AgentUpgraded(agent="w", revision=2, source="api", definition=definition("2.0.0")),
    )
    add(
        journal,
        c.AgentUpgraded(agent="w", revision=3, source="api", definition=definition("3.0.0")),
    )
    add(
        journal,
        c.AgentRolledBack(agent="w", from_revision=3, to_revision=2, reason="trap", automatic=True),
    )
    add(journal, c.AgentSuspended(agent="w", operator="alice"))
    cfg = definition(
        "1.0.0", capabilities={"spend": True}, approval={"spend": True, "timeout_secs": 60}
    )
    add(journal, c.AgentDeployed(agent="cfg", revision=1, source="config", definition=cfg))
    add(
        journal,
        c.AgentDeployed(agent="gone", revision=1, source="api", definition=definition("1.0.0")),
    )
    add(journal, c.AgentRemoved(agent="gone", operator="alice"))
    return journal


def test_the_lifecycle_folds_to_the_agents_the_node_runs():
    model = fold(DeployedAgents(), lifecycle_journal().envelopes)
    assert [a.name for a in model.list()] == ["cfg", "w"]
    w = model.get("w")
    assert w is not None
    assert w.current.revision == 2 and w.current.version == "2.0.0" and w.suspended
    assert [d.revision for d in w.previous] == [1]
    assert model.next_revision("w") == 4  # revision 3 was used, and rolled back
    assert [h.event for h in w.history] == [
        "deployed",
        "upgraded",
        "upgraded",
        "rolled_back",
        "suspended",
    ]
    rolled = w.history[3]
    assert rolled.automatic and rolled.reason == "trap" and rolled.revision == 2
    cfg = model.get("cfg")
    assert cfg is not None and cfg.source == "config" and not cfg.suspended
    assert cfg.current.definition.approval == {"spend": True, "timeout_secs": 60}
    assert cfg.current.version == "1.0.0"
    assert model.get("gone") is None and model.next_revision("gone") == 1


def test_a_replay_and_a_checkpoint_give_the_same_set():
    journal = lifecycle_journal()
    live = DeployedAgents()
    for envelope in journal.envelopes:  # one at a time, as commits arrive
        fold(live, [envelope])
    assert refolded_snapshot(live, journal.envelopes) == live.snapshot()
    assert pickle.loads(pickle.dumps(live)).snapshot() == live.snapshot()


def test_events_that_do_not_fit_or_come_from_elsewhere_change_nothing():
    journal = lifecycle_journal()
    before = fold(DeployedAgents(), journal.envelopes).snapshot()
    add(journal, c.AgentRolledBack(agent="w", from_revision=2, to_revision=9))  # no such below
    add(journal, c.AgentRolledBack(agent="nobody", from_revision=2, to_revision=1))
    add(journal, c.AgentResumed(agent="nobody"))
    add(journal, c.AgentRemoved(agent="cfg"), stream="cfg")  # an agent's own journal
    add(
        journal,
        c.AgentDeployed(agent="x", revision=1, source="api", definition=definition("1.0.0")),
        stream="x",
    )
    journal.add("$node", c.AGENT_DEPLOYED, {"agent": "bad name!", "revision": 1})
    assert fold(DeployedAgents(), journal.envelopes).snapshot() == before
