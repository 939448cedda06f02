"""Peers' heads over NATS are followed, not polled (node/sync/nats/heads.py): a follower that
loses its consumer, its server or its permissions starts over, is counted and logged, and the
link's watchdog restarts the connection while it cannot; acknowledgements come back after.
Real nats-server and node processes on loopback."""

from __future__ import annotations

import asyncio
import re
import signal

import nats
import pytest

from node.sync.nats.permissions import Member, render
from node.sync.nats.subjects import Bucket, bucket_name, heads_consumer_name, kv_stream
from tests.nats_support import MeshUsers, NatsCluster, use_nats_user
from tests.support import NodeProcess, logs_on_failure
from tests.sync import test_nats_mesh
from tests.sync.test_nats_mesh import seed, start_all
from tests.sync.test_sync_mesh import (
    Mesh,
    convergence,
    post_findings,
    wait_converged,
    wait_until,
)

pytestmark = pytest.mark.timeout(240)
# the NATS mesh tests' fixtures: nats-server processes and node processes, killed at the end
cluster_factory = test_nats_mesh.cluster_factory
nats_mesh = test_nats_mesh.nats_mesh
NAMES = ["node-a", "node-b", "node-c"]
HEADS_STREAM = kv_stream(bucket_name("default", Bucket.HEADS))


def metric(node: NodeProcess, name: str) -> float:
    """A counter's value in the node's /metrics (0 when it was never counted)."""
    with node.client() as client:
        text = client.get("/api/v1/metrics").text
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def heads_followers(urls: list[str]) -> list[str]:
    """The consumers on the heads bucket's stream (one per following node)."""

    async def read() -> list[str]:
        nc = await nats.connect(urls, connect_timeout=2)
        try:
            return [c.name for c in await nc.jetstream().consumers_info(HEADS_STREAM)]
        finally:
            await nc.close()

    return asyncio.run(read())


def delete_follower(urls: list[str], node: str) -> None:
    async def delete() -> None:
        nc = await nats.connect(urls, connect_timeout=2)
        try:
            await nc.jetstream().delete_consumer(HEADS_STREAM, heads_consumer_name(node))
        finally:
            await nc.close()

    asyncio.run(delete())


def test_a_follower_whose_consumer_or_server_goes_away_starts_over_and_acks_keep_coming(
    nats_mesh, cluster_factory
):
    cluster: NatsCluster = cluster_factory(1)
    mesh: Mesh = nats_mesh(NAMES, cluster)
    seed(mesh, {"alpha": "node-a", "beta": "node-b"})
    start_all(mesh)
    with logs_on_failure(*(n.log_path for n in mesh.nodes.values())):
        post_findings(mesh["node-b"], "beta", 2)
        wait_converged(mesh, {"alpha": 1, "beta": 3}, timeout=30)
        followers = sorted(heads_consumer_name(n) for n in NAMES)
        assert sorted(heads_followers(cluster.urls)) == followers  # one each, nothing polled
        assert metric(mesh["node-a"], "svc_nats_heads_records_total") >= 2  # b's and c's

        delete_follower(cluster.urls, "node-a")  # the server says so: 409 Consumer Deleted
        wait_until(
            lambda: metric(mesh["node-a"], "svc_nats_heads_restarts_total") >= 1,
            15,
            "node-a's follower starts over",
        )
        post_findings(mesh["node-b"], "beta", 2)
        wait_converged(mesh, {"alpha": 1, "beta": 5}, timeout=30)  # b's and c's acks on a

        server = cluster.servers[0]  # its in-memory consumers are gone with it
        server.kill()
        server.start()
        wait_until(cluster.ready, 30, "the server is back", retry_on=(Exception,))
        post_findings(mesh["node-a"], "alpha", 3)
        post_findings(mesh["node-b"], "beta", 3)
        wait_converged(mesh, {"alpha": 4, "beta": 8}, timeout=60)
        wait_until(
            lambda: sorted(heads_followers(cluster.urls)) == followers, 15, "every follower back"
        )
        assert "nats heads: " in mesh["node-a"].log_path.read_text()


def test_a_follower_that_cannot_follow_is_counted_logged_restarted_by_the_watchdog(
    nats_mesh, tmp_path
):
    """node-a's NATS user lacks the heads follower's permissions (permissions generated before
    this version and not generated again): node-a still delivers and puts its heads, its
    follower fails, is counted and logged, and the watchdog restarts node-a's connection; once
    the server's permissions are generated again (and reloaded), acks reach node-a."""
    members = [Member(name, name) for name in NAMES]
    full = render("default", members)
    follower = heads_consumer_name("node-a")
    stale = "\n".join(line for line in full.splitlines() if follower not in line) + "\n"
    assert stale != full
    include = tmp_path / "nats" / "mesh-permissions.conf"
    include.parent.mkdir(parents=True)
    include.write_text(stale)
    users = MeshUsers(tmp_path / "nats", NAMES, include)
    users.start()
    try:
        mesh: Mesh = nats_mesh(NAMES, users.cluster)
        for name, path in mesh.paths.items():
            use_nats_user(path, name)
            mesh.nodes[name] = NodeProcess(path)
        seed(mesh, {"alpha": "node-a", "beta": "node-b"})
        start_all(mesh)
        with logs_on_failure(*(n.log_path for n in mesh.nodes.values())):
            post_findings(mesh["node-b"], "beta", 2)
            node_a = mesh["node-a"]
            wait_until(
                lambda: metric(node_a, 'svc_nats_stalls_total{loop="heads-read"}') >= 1,
                60,
                "the watchdog restarts node-a's connection",
            )
            assert metric(node_a, "svc_nats_heads_restarts_total") >= 1
            assert metric(node_a, 'svc_nats_stalls_total{loop="consume"}') == 0
            # the stall is counted when found, logged once the connection's tasks have ended
            wait_until(
                lambda: all(
                    line in node_a.log_path.read_text()
                    for line in ("nats heads: ", "heads-read stalled")
                ),
                15,
                "the follower's failure and the stall logged",
            )
            # node-a's data and heads still flow: b and c are converged on beta
            for name in ("node-b", "node-c"):
                wait_until(
                    lambda name=name: (
                        convergence(mesh[name], "beta")
                        == {**convergence(mesh[name], "beta"), "local_seq": 3, "converged": True}
                    ),
                    30,
                    f"beta converged on {name}",
                )

            # the permissions generated again; nats-server reloads them on SIGHUP
            (users.server.root / users.server.name / include.name).write_text(full)
            assert users.server.proc is not None
            users.server.proc.send_signal(signal.SIGHUP)
            post_findings(mesh["node-b"], "beta", 2)
            wait_converged(mesh, {"alpha": 1, "beta": 5}, timeout=60)
    finally:
        users.kill()
