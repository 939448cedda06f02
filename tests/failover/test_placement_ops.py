"""Placement operators can trust (issue 44): an operator's stop, start and removal go with the
agent through failovers, and are its owner's decisions only (issue 51: a home that is not the
owner refuses them naming it); SIGTERM hands an agent over; planned moves stick; a node that
never ran the component takes over within the lease; a node dropped from the set starts as a
replica.
Real node processes on a real 3-server cluster (harness/failover.py, lease TTL 4 s)."""

from __future__ import annotations

import re
import time

import pytest

from harness.failover import (
    AGENT,
    LEASE_TTL_SECS,
    FailoverMesh,
    FindingLoad,
    agent_view,
    counts,
    deploy,
    events,
    same_journals,
    ticks,
    wait_for,
    wait_runner,
)
from tests.failover.test_failover import (
    finding_titles,
    held_by,
    move_to,
    placed_counter,
    start,
    stop,
)
from tests.node.test_lifecycle_restart import cli

pytestmark = pytest.mark.timeout(180)
SET = ["node-a", "node-b", "node-c"]
MOVES = 21  # the last one back to node-a, the owner, which stops it (only the owner may)


def metric(node, name: str) -> float:
    with node.client() as client:
        text = client.get("/api/v1/metrics").text
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def new_home(fm: FailoverMesh, among: list[str]) -> str:
    found = wait_for(
        lambda: next((n for n in among if held_by(fm, n)), None),
        LEASE_TTL_SECS + 15,
        f"one of {among} takes the agent over",
    )
    return str(found)


def test_an_operators_decisions_follow_the_agent_and_sigterm_hands_it_over(failover, built_agents):
    fm = failover()
    placed_counter(fm, built_agents["counter"], SET)
    # a replica asked to upgrade names the home (409), not "not published in this registry"
    with fm["node-b"].client() as client:
        asked = client.put(f"/api/v1/agents/{AGENT}", json={"component": "registry:x@9.9.9"})
    assert asked.status_code == 409 and "node-a" in asked.json()["detail"], asked.text

    # stopped on its home, which then dies: the node that takes over keeps it stopped
    stop(fm["node-a"])
    fm["node-a"].kill()
    taken = new_home(fm, ["node-b", "node-c"])
    view = agent_view(fm[taken])
    assert view["status"] == "stopped" and view["placement"]["stopped_by"] == "admin", view
    # the takeover is seen: metrics and a finding naming the home it replaced
    assert metric(fm[taken], "svc_placement_takeovers_total") == 1
    assert metric(fm[taken], "svc_placement_failover_seconds_count") == 1
    assert metric(fm[taken], "svc_placement_leases_held") == 1
    titles = finding_titles(events(fm[taken]))
    assert any(t.startswith(f"agent {AGENT} taken over from node-a after ") for t in titles)

    # the new home is not the agent's owner: a start asked of it is refused naming the owner
    # (issue 51), and nothing of the agent ran there
    with fm[taken].client() as client:
        refused = client.post(f"/api/v1/agents/{AGENT}/start")
    assert refused.status_code == 409, refused.text
    assert refused.json()["owner"] == "node-a", refused.text
    assert f"agent-node agents move {AGENT} --to node-a" in refused.json()["detail"]
    assert not [e for e in events(fm[taken]) if e["origin"] == taken and e["type"] == "log"]

    # the owner back, the agent moved to it, and started there: it runs
    fm["node-a"].start(60)
    move_to(fm[taken], "node-a")
    assert wait_for(lambda: held_by(fm, "node-a"), 20, "node-a holds the agent again")
    start(fm["node-a"])
    assert wait_runner(fm, 20, among=["node-a"]) == "node-a"
    journal = events(fm["node-a"])
    unhalted = next(i for i, e in enumerate(journal) if e["type"] == "agent.unhalted")
    assert journal[unhalted]["origin"] == "node-a"
    assert not [e for e in journal[:unhalted] if e["origin"] == taken and e["type"] == "log"]

    # SIGTERM of the home: a planned move to a live node of the set, not a takeover
    # (once that node is ready to take it: else the drain rightly gives the lease up instead)
    wait_for(
        lambda: set(SET[1:]) <= set((agent_view(fm["node-a"])["placement"] or {})["candidates"]),
        20,
        "node-b and node-c ready to take it",
    )
    fm["node-a"].terminate()
    third = wait_runner(fm, 15, among=SET[1:])
    journal = events(fm[third])
    moves = [e for e in journal if e["type"] in ("journal.handoff", "journal.takeover")]
    assert moves[-1]["type"] == "journal.handoff" and moves[-1]["origin"] == "node-a"
    log = fm["node-a"].log_path.read_text()
    stopping = log[log.rindex("shutting down") :]
    assert f"agent {AGENT} handed over to {third}" in stopping
    assert " WARNING " not in stopping, stopping  # a clean stop is quiet

    # removed by its owner: it runs nowhere again, not after the home's kill -9 either (the
    # home that is not its owner refuses the removal, naming it)
    with fm[third].client() as client:
        refused = client.delete(f"/api/v1/agents/{AGENT}")
    assert refused.status_code == 409 and refused.json()["owner"] == "node-a", refused.text
    fm["node-a"].start(60)
    move_to(fm[third], "node-a")
    assert wait_runner(fm, 20, among=["node-a"]) == "node-a"
    with fm["node-a"].client() as client:
        removed = client.delete(f"/api/v1/agents/{AGENT}")
    assert removed.status_code == 200, removed.text
    for name in SET:
        wait_for(lambda n=name: agent_view(fm[n]) is None, 20, f"{name} no longer lists it")
    fm["node-a"].kill()
    deadline = time.monotonic() + LEASE_TTL_SECS + 3
    while time.monotonic() < deadline:
        assert not held_by(fm, "node-b") and not held_by(fm, "node-c")
        time.sleep(0.5)
    fm["node-a"].start(60)
    retired = events(fm[third])
    after = retired[[e["type"] for e in retired].index("agent.retired") :]
    assert {e["type"] for e in after} <= {"agent.retired", "agent.stopped", "grant.revoked"}
    assert agent_view(fm["node-a"]) is None

    # deployed again on its old home (issue 52 item 6): its journal goes on at its epoch
    # (moves made it 3), the lease is taken at that epoch, and no other node takes it over
    # (a lease at epoch 0 counted as none: another node took it a second later, the old
    # home logging "did not stop" and a fenced journal)
    epoch = max(e["data"]["epoch"] for e in retired if "epoch" in e["data"])
    logged = len(fm["node-a"].log_path.read_text())
    again = deploy(fm["node-a"], "registry:counter@1.0.0", SET)
    assert again.status_code == 201, again.text
    assert wait_runner(fm, 20, among=["node-a"]) == "node-a"
    deadline = time.monotonic() + LEASE_TTL_SECS + 3
    while time.monotonic() < deadline:
        assert not held_by(fm, "node-b") and not held_by(fm, "node-c")
        time.sleep(0.5)
    assert agent_view(fm["node-a"])["placement"]["epoch"] == epoch
    since = fm["node-a"].log_path.read_text()[logged:]
    assert "did not stop" not in since and "is fenced" not in since, since


def test_planned_moves_under_load_stick_every_time(failover, built_agents):
    """MOVES moves in a row, each to the next node of the set while findings are posted to the
    home: each one sticks (no takeover at all in the journal, epochs 1..MOVES), nothing
    acknowledged is lost, and the counter goes on from node to node."""
    fm = failover()
    placed_counter(fm, built_agents["counter"], SET)
    home = "node-a"
    with FindingLoad(fm) as load:
        wait_for(lambda: len(ticks(events(fm["node-a"]))) >= 3, 20, "a few ticks on node-a")
        wait_for(
            lambda: "node-b" in (agent_view(fm["node-a"])["placement"] or {})["candidates"],
            30,
            "node-b ready to take it",
        )
        moved = cli(fm["node-a"], "move", AGENT, "--to", "node-b")  # the CLI's call
        assert moved.returncode == 0, moved.stderr
        assert f"{AGENT}: handed over to node-b (epoch 1, handoff at seq" in moved.stdout
        home = "node-b"
        for epoch in range(2, MOVES + 1):
            assert wait_runner(fm, 20) == home
            to = SET[epoch % 3]
            wait_for(  # what the console's Move offers: a node ready to take it
                lambda h=home, t=to: t in (agent_view(fm[h])["placement"] or {})["candidates"],
                20,
                f"{to} ready to take it",
            )
            with fm[home].client() as client:
                answer = client.post(f"/api/v1/agents/{AGENT}/move", json={"to": to})
            assert answer.status_code == 200, (epoch, answer.text)
            assert answer.json()["epoch"] == epoch
            home = to
        assert wait_runner(fm, 20) == home
        wait_for(lambda: any(n == home for _, n in ticks(events(fm[home]))), 20, "it ticks")
    assert home == "node-a"
    stop(fm[home])  # a journal that stops growing, to compare copies (the owner's decision)
    journal = same_journals(fm, SET)
    kinds = [e for e in journal if e["type"] in ("journal.handoff", "journal.takeover")]
    assert [e["type"] for e in kinds] == ["journal.handoff"] * MOVES  # none bounced
    assert [e["data"]["epoch"] for e in kinds] == list(range(1, MOVES + 1))
    # each home wrote nothing after its handoff: every envelope is its epoch's home's
    writer = journal[0]["origin"]
    for e in journal:
        assert e["origin"] == writer, e
        if e["type"] == "journal.handoff":
            writer = e["data"]["to"]
    counted = counts(journal)
    assert counted == list(range(1, len(counted) + 1)), counted
    assert not set(load.acknowledged) - finding_titles(journal)  # nothing acknowledged lost
    assert len(load.acknowledged) > 20
    replica = next(n for n in SET if n != home)
    shown = cli(fm[replica], "show", AGENT)
    assert f"runs on: {home} (epoch {MOVES})" in shown.stdout, shown.stdout
    assert "handoff" in shown.stdout.split("moves (newest first):")[1]
    listed = cli(fm["node-a"] if home != "node-a" else fm["node-b"], "list")
    assert "RUNS ON" in listed.stdout and "replica" in listed.stdout, listed.stdout


def test_a_node_that_never_ran_the_component_takes_over_within_the_lease(failover, built_agents):
    """node-b compiles for itself (no shared compile cache): it compiles the component when it
    learns of the placement, so after node-a's kill -9 its takeover takes the lease TTL plus
    seconds, not a compile. node-a handed the agent's ownership to node-b before: node-b drops
    node-a from the set, and node-a starts again as a replica."""
    fm = failover(own_compile_cache=("node-b",))
    placed_counter(fm, built_agents["counter"], ["node-a", "node-b"])
    wait_for(
        lambda: (agent_view(fm["node-a"])["placement"] or {}).get("candidates") == ["node-b"],
        120,
        "node-b ready to host it (compiled there)",
    )
    assert "compiled ahead of a takeover" in fm["node-b"].log_path.read_text()
    # node-a hands the agent's ownership to node-b first (issue 51): node-b's decisions count
    with fm["node-a"].client() as client:
        handed = client.post(f"/api/v1/agents/{AGENT}/owner", json={"to": "node-b"})
        outside = client.post(f"/api/v1/agents/{AGENT}/owner", json={"to": "node-c"})
    assert handed.status_code == 200, handed.text
    assert "owned by 'node-b' now" in handed.json()["message"]
    assert outside.status_code == 409 and outside.json()["owner"] == "node-b", outside.text
    killed = time.monotonic()
    fm["node-a"].kill()
    assert wait_runner(fm, LEASE_TTL_SECS + 15, among=["node-b"]) == "node-b"
    took = time.monotonic() - killed
    print(f"cold takeover by node-b {took:.1f} s after the kill")
    assert took <= LEASE_TTL_SECS + 5, took

    # the set without node-a (asked of the new home, its owner now), then node-a starts
    # again: a replica
    component = agent_view(fm["node-b"])["current"]["component"]
    with fm["node-b"].client() as client:
        placed = client.put(
            f"/api/v1/agents/{AGENT}",
            json={"component": component, "tick_interval_ms": 200, "placement": SET[1:]},
        )
    assert placed.status_code == 200, placed.text
    fm["node-a"].start(60)

    def caught_up() -> dict | None:
        view = agent_view(fm["node-a"])
        placement = (view or {}).get("placement") or {}
        return view if placement.get("placement") == SET[1:] else None

    view = wait_for(caught_up, 30, "node-a catches up, a replica")
    assert view["status"] == "replica" and view["placement"]["home"] == "node-b"
    # started again knowing it was dropped (what refused to start before): it starts, a replica
    assert fm["node-a"].terminate() == 0
    fm["node-a"].start(60)
    warned = fm["node-a"].log_path.read_text()
    assert "kept as a replica, never run here" in warned
    assert "Not `agent-node agents rm` on its home" in warned  # that would remove it everywhere
    view = wait_for(lambda: agent_view(fm["node-a"]), 20, "node-a lists it")
    assert view["status"] == "replica" and view["placement"]["home"] == "node-b"
    assert wait_runner(fm, 5, among=SET) == "node-b"
