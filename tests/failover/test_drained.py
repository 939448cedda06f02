"""Drained nodes and lapsed handoffs (issue 52 item 3): a node that drains leaves the
candidates at once (its advert says so), a move to it is refused (409) with the reason, and a
handoff whose target never took the agent up is reported as what it was. Real node processes
on a real 3-server cluster (harness/failover.py)."""

from __future__ import annotations

import signal

import pytest

from harness.failover import AGENT, LEASE_TTL_SECS, agent_view, events, wait_for, wait_runner
from tests.failover.test_failover import finding_titles, placed_counter
from tests.failover.test_placement_ops import SET

pytestmark = pytest.mark.timeout(180)


def candidates(node) -> list[str]:
    return (agent_view(node)["placement"] or {}).get("candidates", [])


def test_a_drained_node_is_no_target_and_a_lapsed_handoff_is_named(failover, built_agents):
    fm = failover()
    placed_counter(fm, built_agents["counter"], SET)
    wait_for(lambda: candidates(fm["node-a"]) == ["node-b", "node-c"], 30, "b and c ready")

    with fm["node-c"].client() as client:
        drained = client.post("/api/v1/node/drain", params={"within_s": 5})
    assert drained.status_code == 200, drained.text
    assert candidates(fm["node-a"]) == ["node-b"]  # at once: its advert says it drains
    with fm["node-a"].client() as client:
        refused = client.post(f"/api/v1/agents/{AGENT}/move", json={"to": "node-c"})
    assert refused.status_code == 409, refused.text
    assert "node-c" in refused.json()["detail"] and "drain" in refused.json()["detail"]
    assert wait_runner(fm, 5, among=["node-a"]) == "node-a"  # nothing moved

    # a target frozen right after its advert: the handoff is taken by no one; the node that
    # handed it over takes it back and says the handoff lapsed (not that a home died)
    fm["node-b"].proc.send_signal(signal.SIGSTOP)
    try:
        with fm["node-a"].client() as client:
            moved = client.post(f"/api/v1/agents/{AGENT}/move", json={"to": "node-b"})
        assert moved.status_code == 200, moved.text
        wait_runner(fm, LEASE_TTL_SECS * 3 + 20, among=["node-a"])
        titles = finding_titles(events(fm["node-a"]))
        lapsed = [t for t in titles if "handoff to node-b lapsed" in t]
        assert lapsed, titles
        assert not [t for t in titles if t.startswith(f"agent {AGENT} taken over from ")]
    finally:
        fm["node-b"].proc.send_signal(signal.SIGCONT)


def test_the_last_node_shutting_down_hands_to_no_node_that_stopped(failover, built_agents):
    """Issue 52 item 7: the replicas stopped (SIGTERM) moments before the home does; their
    adverts still live, but say they drained: the home gives the lease up, it hands nothing to
    a node that is gone."""
    fm = failover()
    placed_counter(fm, built_agents["counter"], SET)
    wait_for(lambda: candidates(fm["node-a"]) == ["node-b", "node-c"], 30, "b and c ready")
    for name in ("node-c", "node-b"):
        assert fm[name].terminate() == 0
    assert fm["node-a"].terminate() == 0
    log = fm["node-a"].log_path.read_text()
    stopping = log[log.rindex("shutting down") :]
    assert "handed over to" not in stopping, stopping
    assert f"agent {AGENT}: its lease given up for another node to take" in stopping, stopping
