"""The mesh over NATS JetStream: real nats-server processes, real node processes, loopback."""

from __future__ import annotations

import time

import pytest

from tests.nats_support import NatsCluster, nats_mesh_toml, stream_state
from tests.sync.test_sync_mesh import (
    Mesh,
    assert_same_everywhere,
    convergence,
    post_findings,
    wait_converged,
)
from tests.sync_support import SYNC_TUNING

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def cluster_factory(tmp_path):
    clusters: list[NatsCluster] = []

    def make(size: int = 1) -> NatsCluster:
        clusters.append(NatsCluster(tmp_path / f"c{len(clusters)}", size).start())
        return clusters[-1]

    yield make
    for cluster in clusters:
        cluster.kill()


@pytest.fixture
def nats_mesh(tmp_path, cluster_factory):
    meshes: list[Mesh] = []

    def make(names: list[str], cluster: NatsCluster, replicas: int = 1, **kw) -> Mesh:
        extra = SYNC_TUNING + nats_mesh_toml(cluster.urls, replicas=replicas, **kw)
        meshes.append(Mesh(tmp_path / f"m{len(meshes)}", names, extra=extra))
        return meshes[-1]

    yield make
    for mesh in meshes:
        mesh.kill_all()


def test_three_nodes_converge_over_one_nats_server(nats_mesh, cluster_factory):
    cluster = cluster_factory(1)
    mesh = nats_mesh(["node-a", "node-b", "node-c"], cluster)
    mesh.start()
    for i, name in enumerate(mesh.nodes):
        post_findings(mesh[name], f"agent-{name}", 10 + i)
    expected = {f"agent-{name}": 10 + i for i, name in enumerate(mesh.nodes)}
    wait_converged(mesh, expected, timeout=30)
    assert_same_everywhere(mesh, expected)
    state = stream_state(cluster.urls)
    assert state["messages"] == sum(expected.values())
