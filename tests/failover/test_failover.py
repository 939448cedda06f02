"""Placed agents that outlive their node (issue 36): real node processes, a real 3-server
nats-server cluster, a lease TTL of 3 s (tests/failover/support.py)."""

from __future__ import annotations

import pytest

from node.api.runtime import COMPILED_CACHE_ENV
from tests.failover.support import (
    AGENT,
    LEASE_TTL_SECS,
    FailoverMesh,
    agent_view,
    deploy,
    events,
    publish_component,
    same_journals,
    ticks,
    wait_for,
    wait_runner,
)
from tests.runtime_support import COMPILED_CACHE

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def failover(tmp_path, monkeypatch):
    monkeypatch.setenv(COMPILED_CACHE_ENV, str(COMPILED_CACHE))
    meshes: list[FailoverMesh] = []

    def make(**kwargs) -> FailoverMesh:
        meshes.append(FailoverMesh(tmp_path / f"f{len(meshes)}", **kwargs).start())
        return meshes[-1]

    yield make
    for mesh in meshes:
        mesh.kill()


def placed_counter(fm: FailoverMesh, wasm, placement: list[str], **body) -> None:
    component = publish_component(fm["node-a"], wasm)
    deployed = deploy(fm["node-a"], component, placement, **body)
    assert deployed.status_code == 201, deployed.text
    assert wait_runner(fm, 20) == "node-a"


def test_a_placed_agent_is_listed_on_every_node_of_its_set_and_runs_on_one(
    failover, built_agents
):
    fm = failover()
    placed_counter(fm, built_agents["counter"], ["node-a", "node-b", "node-c"])
    for name in ("node-b", "node-c"):  # replicas: where it runs, nothing written by them
        view = wait_for(lambda n=name: agent_view(fm[n]), 20, f"{name} lists the agent")
        assert view["status"] == "replica"
        assert view["placement"]["home"] == "node-a"
        assert view["placement"]["lease"] is None
        assert view["placement"]["placement"] == ["node-a", "node-b", "node-c"]
    home = agent_view(fm["node-a"])
    assert home["placement"]["lease"]["holder"] == "node-a"
    assert 0 < home["placement"]["lease"]["expires_in"] <= LEASE_TTL_SECS
    journal = events(fm["node-a"])
    assert journal[0]["type"] == "agent.placed" or any(e["type"] == "agent.placed" for e in journal)
    assert {e["origin"] for e in journal} == {"node-a"}
