"""Revision numbers are the journal's (issue 52 item 5): every home numbers a placed agent's
deployments from its journal, and a node that takes it over records the revision the journal
names, so the home and every replica call each deployment alike, after takeovers too. Real
node processes on a real 3-server cluster (harness/failover.py)."""

from __future__ import annotations

import pytest

from harness.failover import (
    FailoverMesh,
    agent_view,
    deploy,
    move_to,
    publish_component,
    wait_for,
    wait_runner,
)
from tests.failover.test_failover import placed_counter
from tests.failover.test_placement_ops import SET, new_home

pytestmark = pytest.mark.timeout(180)


def revisions(fm: FailoverMesh) -> dict[str, tuple[int, int]]:
    """Per live node: (the revision it shows, the one the agent's journal names there)."""
    shown = {}
    for name in fm.alive():
        view = agent_view(fm[name]) or {}
        placement = view.get("placement") or {}
        shown[name] = (view.get("current", {}).get("revision"), placement.get("revision"))
    return shown


def same_revision_everywhere(fm: FailoverMesh, revision: int) -> dict[str, tuple[int, int]]:
    return wait_for(
        lambda: (
            (r := revisions(fm)) and all(pair == (revision, revision) for pair in r.values()) and r
        ),
        20,
        f"every node shows revision {revision}",
    )


def upgrade(fm: FailoverMesh, home: str, wasm, version: str) -> str:
    component = publish_component(fm[home], wasm, version=version)
    answer = deploy(fm[home], component, SET)
    assert answer.status_code == 200, answer.text
    return answer.json()["message"]


def test_every_node_numbers_the_deployments_alike_after_takeovers(failover, built_agents):
    fm = failover()
    wasm = built_agents["counter"]
    placed_counter(fm, wasm, SET)  # revision 1 on node-a
    assert "revision 2" in upgrade(fm, "node-a", wasm, "1.1.0")
    same_revision_everywhere(fm, 2)

    fm["node-a"].kill()  # the new home records the journal's revision 2, not its own 1
    taker = new_home(fm, ["node-b", "node-c"])
    wait_runner(fm, 30, among=[taker])
    fm["node-a"].start(60)
    assert len(same_revision_everywhere(fm, 2)) == 3

    move_to(fm, taker, "node-a")  # the owner upgrades (docs/mesh.md, the owner decides)
    assert "revision 3" in upgrade(fm, "node-a", wasm, "1.2.0")  # one more than the journal's
    same_revision_everywhere(fm, 3)
    fm["node-a"].kill()
    second = new_home(fm, [n for n in SET if n != "node-a"])
    wait_runner(fm, 30, among=[second])
    fm["node-a"].start(60)
    shown = same_revision_everywhere(fm, 3)
    assert sorted(shown) == SET, shown
