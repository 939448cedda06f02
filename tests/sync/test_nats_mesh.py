"""The mesh over NATS JetStream: real nats-server processes, real node processes, loopback."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import msgspec
import nats
import pytest
from nats.js.errors import NotFoundError

from eventstore.keys import load_or_create_key
from node.sync.nats.subjects import envelope_subjects, inbox_prefix, subject, token
from tests.nats_support import (
    MeshUsers,
    NatsCluster,
    as_member,
    consumer_state,
    member_password,
    nats_mesh_toml,
    stream_envelopes,
    stream_state,
    use_nats_user,
)
from tests.support import ADMIN_TOKEN, NodeProcess, auth
from tests.sync.test_sync_mesh import (
    Mesh,
    assert_same_everywhere,
    convergence,
    journal,
    post_findings,
    wait_converged,
    wait_until,
)
from tests.sync_support import SYNC_TUNING, prefill, signed_chain, write_mesh

pytestmark = pytest.mark.timeout(240)
ROOT = Path(__file__).resolve().parents[2]


def seed(mesh: Mesh, journals: dict[str, str]) -> None:
    """One finding in each node's journal before it starts ({journal: its node}): findings are
    posted only about a journal a node has (404 otherwise, never a new journal)."""
    for journal_name, node in journals.items():
        prefill(mesh.paths[node], {journal_name: 1})


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
    seed(mesh, {f"agent-{name}": name for name in mesh.nodes})
    mesh.start()
    for i, name in enumerate(mesh.nodes):
        post_findings(mesh[name], f"agent-{name}", 9 + i)
    expected = {f"agent-{name}": 10 + i for i, name in enumerate(mesh.nodes)}
    wait_converged(mesh, expected, timeout=30)
    assert_same_everywhere(mesh, expected)
    held = stream_envelopes(cluster.urls)  # each envelope once, on its origin's subject
    assert sorted(held) == sorted(
        (subject("default", name, f"agent-{name}"), f"agent-{name}", seq)
        for name in mesh.nodes
        for seq in range(1, expected[f"agent-{name}"] + 1)
    )
    state = stream_state(cluster.urls)
    assert state["messages"] <= len(held)  # a message holds a run of envelopes
    # each node reads its peers' subjects only: its own messages do not come back to it
    for name in mesh.nodes:
        consumer = consumer_state(cluster.urls, name)
        peers = [n for n in mesh.nodes if n != name]
        assert consumer["filters"] == sorted(envelope_subjects("default", p) for p in peers)
        messages = sum(state["subjects"][subject("default", p, f"agent-{p}")] for p in peers)
        assert consumer["delivered"] == messages
    with mesh["node-a"].client() as client:  # the console's mesh view, from the heads bucket
        view = client.get("/api/v1/mesh").json()
    assert {j["agent"] for j in view["journals"] if j["converged"]} >= set(expected)


def test_a_peer_added_to_the_config_is_read_from_the_stream_after_a_restart(
    nats_mesh, cluster_factory
):
    cluster = cluster_factory(1)
    mesh = nats_mesh(["node-a", "node-b", "node-c"], cluster)
    seed(mesh, {"alpha": "node-a", "gamma": "node-c"})
    config = mesh.paths["node-a"]
    full = config.read_text()

    def filters_of(node: str) -> list[str] | None:
        try:
            return consumer_state(cluster.urls, node)["filters"]
        except NotFoundError:  # the node creates it once connected
            return None

    config.write_text(full[: full.index('\n[[auth.tokens]]\nname = "node-c"')])  # no node-c
    mesh["node-a"].start()
    reads_only_b = [envelope_subjects("default", "node-b")]
    wait_until(lambda: filters_of("node-a") == reads_only_b, 30, "a's consumer (b's subjects)")
    mesh["node-c"].start()
    post_findings(mesh["node-c"], "gamma", 3)
    mesh["node-a"].terminate()
    config.write_text(full)  # node-c joins node-a's peers
    mesh["node-a"].start()
    reads_b_and_c = sorted(envelope_subjects("default", p) for p in ("node-b", "node-c"))
    wait_until(lambda: filters_of("node-a") == reads_b_and_c, 30, "a's consumer updated")
    wait_until(lambda: convergence(mesh["node-a"], "gamma")["local_seq"] == 4, 30, "a has gamma")
    assert journal(mesh["node-a"], "gamma") == journal(mesh["node-c"], "gamma")


def start_all(mesh: Mesh, *names: str) -> None:
    """Start nodes in parallel (each start waits for its health check)."""
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: mesh[n].start(60), names or list(mesh.nodes)))


def test_six_nodes_on_a_three_server_cluster_converge_and_survive_a_server_kill(
    nats_mesh, cluster_factory
):
    """Two nodes per server (bench/mesh.py measures larger meshes)."""
    cluster = cluster_factory(3)
    names = [f"node-{i}" for i in range(6)]
    mesh = nats_mesh(names, cluster, replicas=3)
    seed(mesh, {f"agent-{n}": n for n in names})
    start_all(mesh)
    with ThreadPoolExecutor(len(names)) as pool:
        list(pool.map(lambda n: post_findings(mesh[n], f"agent-{n}", 7), names))
    expected = {f"agent-{n}": 8 for n in names}
    diag_converged(mesh, expected)
    assert_same_everywhere(mesh, expected)
    held = stream_envelopes(cluster.urls)  # each envelope once, however many nodes read it
    assert len(held) == len(set(held)) == 8 * len(names), held

    cluster.servers[0].kill()  # one of three: JetStream R3 keeps its quorum
    with ThreadPoolExecutor(len(names)) as pool:
        list(pool.map(lambda n: post_findings(mesh[n], f"agent-{n}", 4), names))
    expected = {f"agent-{n}": 12 for n in names}
    # the nodes that were on the killed server reconnect to another one first (with backoff)
    diag_converged(mesh, expected, timeout=120)
    assert_same_everywhere(mesh, expected)
    held = stream_envelopes(cluster.urls[1:])
    assert len(held) == len(set(held)) == 12 * len(names), held


def diag_converged(mesh: Mesh, expected: dict[str, int], timeout: float = 60) -> None:
    """wait_converged, printing every node's unconverged journals and NATS metrics on failure."""
    try:
        wait_converged(mesh, expected, timeout=timeout)
    except Exception:
        for name, node in mesh.nodes.items():
            behind = []
            for agent, head in expected.items():
                report = convergence(node, agent)
                if not report["converged"] or report["local_seq"] != head:
                    lagging = [(p["peer_id"], p["acked_seq"]) for p in report["peers"] if p["lag"]]
                    behind.append((agent, report["local_seq"], lagging))
            with node.client() as client:
                text = client.get("/api/v1/metrics").text
            print(name, behind, [x for x in text.splitlines() if x.startswith("svc_nats")])
        raise


def test_kill_9_of_a_node_in_a_write_burst_loses_nothing_it_acknowledged(
    nats_mesh, cluster_factory
):
    cluster = cluster_factory(1)
    mesh = nats_mesh(["node-a", "node-b", "node-c"], cluster)
    seed(mesh, {"alpha": "node-a"})
    start_all(mesh)
    acknowledged = 0

    def burst() -> None:
        nonlocal acknowledged
        with httpx.Client(base_url=mesh["node-a"].url, headers=auth(ADMIN_TOKEN)) as client:
            for i in range(100_000):
                try:
                    r = client.post(
                        "/api/v1/findings",
                        json={"agent": "alpha", "severity": "low", "title": f"{i}"},
                    )
                except httpx.HTTPError:
                    return
                if r.status_code == 201:
                    acknowledged += 1

    writer = threading.Thread(target=burst)
    writer.start()
    wait_until(lambda: acknowledged >= 60, 30, "the burst to be under way")
    mesh["node-a"].kill()
    writer.join(30)
    mesh["node-a"].start()
    head = convergence(mesh["node-a"], "alpha")["local_seq"]
    assert head >= acknowledged
    post_findings(mesh["node-a"], "alpha", 5)
    wait_converged(mesh, {"alpha": head + 5}, timeout=60)
    assert_same_everywhere(mesh, {"alpha": head + 5})


def test_a_node_joining_while_a_home_node_is_down_gets_its_journals(nats_mesh, cluster_factory):
    cluster = cluster_factory(1)
    mesh = nats_mesh(["node-a", "node-b", "node-c"], cluster)
    seed(mesh, {"alpha": "node-a", "beta": "node-b"})
    start_all(mesh, "node-a", "node-b")
    post_findings(mesh["node-a"], "alpha", 14)
    post_findings(mesh["node-b"], "beta", 4)
    wait_until(lambda: convergence(mesh["node-b"], "alpha")["local_seq"] == 15, 30, "b has alpha")
    mesh["node-a"].kill()  # alpha's home is down for good
    mesh["node-c"].start()
    wait_until(lambda: convergence(mesh["node-c"], "alpha")["local_seq"] == 15, 30, "c gets alpha")
    wait_until(lambda: convergence(mesh["node-c"], "beta")["local_seq"] == 5, 30, "c gets beta")
    copies = [journal(mesh[n], "alpha") for n in ("node-b", "node-c")]
    assert copies[0] == copies[1] and len(copies[0]) == 15


def test_signed_but_invalid_envelopes_on_the_stream_are_rejected_by_every_node(
    nats_mesh, cluster_factory, tmp_path
):
    cluster = cluster_factory(1)
    # node-x is a configured peer (its key is pinned everywhere) that is never started: the
    # test publishes in its name, as a compromised node would
    mesh = nats_mesh(["node-a", "node-b", "node-c", "node-x"], cluster)
    names = ["node-a", "node-b", "node-c"]
    seed(mesh, {"alpha": "node-a"})
    start_all(mesh, *names)
    post_findings(mesh["node-a"], "alpha", 2)
    wait_until(lambda: convergence(mesh["node-b"], "alpha")["local_seq"] == 3, 30, "b has alpha")
    key_x = load_or_create_key(tmp_path / "m0" / "node-x" / "data")
    bad_data = signed_chain(key_x, "node-x", "junk", 1, data={"severity": "bogus", "title": 7})
    alpha_prev = journal(mesh["node-b"], "alpha")[-1][1]
    wrong_owner = signed_chain(key_x, "node-x", "alpha", 1, start=4, prev=alpha_prev)
    publish(cluster.urls, "node-x", bad_data + wrong_owner)
    post_findings(mesh["node-a"], "alpha", 4)  # consumption goes on past them
    for name in names:  # (node-x never acknowledges: convergence reports would wait for it)
        wait_until(
            lambda n=name: convergence(mesh[n], "alpha")["local_seq"] == 7, 30, f"{name}: alpha"
        )

    for name in names:
        with mesh[name].client() as client:
            findings = client.get("/api/v1/findings", params={"limit": 1000}).json()["findings"]
            metrics = client.get("/api/v1/metrics").text
        titles = {f["title"] for f in findings if f["agent"] == name and f["severity"] == "high"}
        assert titles == {
            "rejected envelope junk#1 from the mesh stream",
            "rejected envelope alpha#4 from the mesh stream",
        }, (name, titles)
        assert 'svc_sync_rejected_total{reason="invalid_data"} 1.0' in metrics
        # alpha is node-a's own journal: there the envelope is refused as such
        reason = "own_journal" if name == "node-a" else "foreign_writer"
        assert f'svc_sync_rejected_total{{reason="{reason}"}} 1.0' in metrics
        assert convergence(mesh[name], "junk")["local_seq"] == 0


def test_a_node_offline_past_retention_catches_up_over_http(nats_mesh, cluster_factory):
    cluster = cluster_factory(1)
    mesh = nats_mesh(["node-a", "node-b", "node-c"], cluster, max_age=2)
    seed(mesh, {"alpha": "node-a"})
    start_all(mesh)
    post_findings(mesh["node-a"], "alpha", 4)
    wait_converged(mesh, {"alpha": 5}, timeout=30)
    mesh["node-c"].kill()
    post_findings(mesh["node-a"], "alpha", 20)
    wait_until(lambda: stream_state(cluster.urls)["messages"] == 0, 30, "the stream to age out")
    mesh["node-a"].kill()  # and the home is down too: node-b relays
    mesh["node-c"].start()
    wait_until(lambda: convergence(mesh["node-c"], "alpha")["local_seq"] == 25, 30, "repair")
    assert journal(mesh["node-c"], "alpha") == journal(mesh["node-b"], "alpha")
    with mesh["node-c"].client() as client:
        metrics = client.get("/api/v1/metrics").text
    assert "svc_nats_repaired_envelopes_total 20.0" in metrics


def test_the_same_nodes_over_http_then_nats_end_with_the_same_hashes(
    nats_mesh, cluster_factory, tmp_path
):
    """How a running HTTP mesh moves to NATS: stop, add [mesh], start; nothing is lost."""
    cluster = cluster_factory(1)
    names = ["node-a", "node-b", "node-c"]
    mesh = Mesh(tmp_path / "http", names)  # HTTP first
    seed(mesh, {f"agent-{name}": name for name in names})
    try:
        start_all(mesh)
        for name in names:
            post_findings(mesh[name], f"agent-{name}", 5)
        expected = {f"agent-{n}": 6 for n in names}
        wait_converged(mesh, expected, timeout=30)
        over_http = {a: journal(mesh[names[0]], a) for a in expected}
        mesh.stop_all()
        for path in mesh.paths.values():
            path.write_text(path.read_text() + nats_mesh_toml(cluster.urls))
        mesh.nodes = {n: NodeProcess(p) for n, p in mesh.paths.items()}
        start_all(mesh)
        for name in names:
            post_findings(mesh[name], f"agent-{name}", 4)
        expected = {f"agent-{n}": 10 for n in names}
        wait_converged(mesh, expected, timeout=30)
        assert_same_everywhere(mesh, expected)
        for agent, envelopes in over_http.items():
            assert journal(mesh[names[1]], agent)[:6] == envelopes
    finally:
        mesh.kill_all()


def publish(urls: list[str], node: str, envelopes: list[dict]) -> None:
    async def run() -> None:
        nc = await nats.connect(urls)
        try:
            js = nc.jetstream()
            for envelope in envelopes:
                await js.publish(
                    subject("default", node, envelope["agent"]), msgspec.json.encode(envelope)
                )
        finally:
            await nc.close()

    asyncio.run(run())


SHIPPED_PERMISSIONS = ROOT / "deploy" / "nats" / "mesh-permissions.conf"


def test_the_shipped_permissions_are_what_the_generator_prints_for_three_nodes(tmp_path):
    """deploy/nats/mesh-permissions.conf is generated, from configs or names alike."""
    names = ["node-a", "node-b", "node-c"]
    configs = write_mesh(tmp_path, names, extra=nats_mesh_toml(["nats://127.0.0.1:4222"]))
    for name, path in configs.items():
        use_nats_user(path, name)
    from_configs = agent_node("mesh", "nats-permissions", *map(str, configs.values()))
    from_names = agent_node("mesh", "nats-permissions", *(f"--node={n}" for n in names))
    assert from_configs == from_names == SHIPPED_PERMISSIONS.read_text()
    # two nodes that would share a user (or its password variable) are refused
    clash = subprocess.run(
        [sys.executable, "-m", "node", "mesh", "nats-permissions", "--node=a.b", "--node=a-b"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert clash.returncode == 2 and "password variable A_B_PASSWORD" in clash.stderr


def agent_node(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "node", *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    return done.stdout


def test_the_shipped_permissions_let_three_nodes_converge_and_each_only_its_own(
    nats_mesh, tmp_path
):
    """deploy/nats/mesh-permissions.conf as shipped: node-a, node-b and node-c (each with two
    peers: a consumer of two filter subjects) converge with their own users; node-a's user
    cannot publish on node-b's subjects nor write its heads record, nor read its replies."""
    users = MeshUsers(tmp_path / "nats", ["node-a", "node-b", "node-c"], SHIPPED_PERMISSIONS)
    users.start()
    try:
        mesh = nats_mesh(["node-a", "node-b", "node-c"], users.cluster)
        for name, path in mesh.paths.items():
            use_nats_user(path, name)
            mesh.nodes[name] = NodeProcess(path)
        seed(mesh, {"alpha": "node-a", "beta": "node-b", "gamma": "node-c"})
        start_all(mesh)
        post_findings(mesh["node-a"], "alpha", 4)
        post_findings(mesh["node-b"], "beta", 4)
        post_findings(mesh["node-c"], "gamma", 4)
        expected = {"alpha": 5, "beta": 5, "gamma": 5}
        wait_converged(mesh, expected, timeout=30)
        assert_same_everywhere(mesh, expected)
        assert len(stream_envelopes(users.cluster.urls, user="node-a")) == 15
        for log_path in (p.parent / "node.log" for p in mesh.paths.values()):
            text = log_path.read_text()
            assert member_password("node-a") not in text
            assert "permissions violation" not in text.lower(), log_path
        password = member_password("node-a")
        denied = asyncio.run(_try_publish(users.server.url, "node-a", password, "node-b"))
        assert denied == ["denied", "denied"], denied
        assert asyncio.run(_try_subscribe(users.server.url, "node-a", password, "node-b"))
    finally:
        users.kill()


async def _try_publish(url: str, user: str, password: str, victim: str) -> list[str]:
    """Publish as `user` on `victim`'s envelope subject and heads record: what the server said."""
    errors: list[Exception] = []

    async def on_error(exc: Exception) -> None:
        errors.append(exc)

    nc = await nats.connect(
        url, user=user, password=password, error_cb=on_error, inbox_prefix=inbox_prefix(user)
    )
    out = []
    try:
        js = nc.jetstream(timeout=2)
        for target in (
            subject("default", victim, "beta"),
            f"$KV.MESH_default_HEADS.{token(victim)}",
        ):
            try:
                await js.publish(target, b"{}")
                out.append("published")
            except (nats.errors.TimeoutError, nats.js.errors.NoStreamResponseError):
                out.append("denied")  # the server drops it: no stream ever answers
    finally:
        await nc.close()
    assert sum("permissions violation" in str(e).lower() for e in errors) == 2, errors
    return out


async def _try_subscribe(url: str, user: str, password: str, victim: str) -> bool:
    """Subscribe as `user` to `victim`'s inbox prefix (and to every inbox): True when the
    server refused both."""
    errors: list[Exception] = []

    async def on_error(exc: Exception) -> None:
        errors.append(exc)

    nc = await nats.connect(url, user=user, password=password, error_cb=on_error)
    try:
        await nc.subscribe(f"{inbox_prefix(victim)}.>")
        await nc.subscribe("_INBOX.>")
        await nc.flush(2)
        await asyncio.sleep(0.2)
    finally:
        await nc.close()
    refused = [e for e in errors if "permissions violation for subscription" in str(e).lower()]
    return len(refused) == 2


def test_a_member_that_takes_a_nodes_next_message_ids_first_is_named_and_changes_nothing(
    nats_mesh, tmp_path
):
    """node-x, a member with its own NATS user, publishes node-a's next message ids first (on
    its own subject: the server de-duplicates ids per stream). node-a's envelopes still reach
    the stream, on its own subject, and every node; node-a names node-x in a finding."""
    names = ["node-a", "node-b", "node-c", "node-x"]
    users = MeshUsers(tmp_path / "nats", names).start()
    try:
        mesh = nats_mesh(names, users.cluster)
        for name, path in mesh.paths.items():
            use_nats_user(path, name)
            mesh.nodes[name] = NodeProcess(path)
        seed(mesh, {"alpha": "node-a"})
        start_all(mesh, "node-a", "node-b", "node-c")  # node-x is never started: the test is it
        wait_until(lambda: convergence(mesh["node-b"], "alpha")["local_seq"] == 1, 30, "b: alpha")
        taken = [f"node-a:alpha:{a}-{b}" for a in range(2, 12) for b in range(a, a + 4)]
        asyncio.run(_publish_ids(users.cluster.urls, "node-x", "alpha", taken))
        for _ in range(10):
            post_findings(mesh["node-a"], "alpha", 1)  # one commit, one message each
        for name in ("node-a", "node-b", "node-c"):
            wait_until(
                lambda n=name: convergence(mesh[n], "alpha")["local_seq"] == 11, 60, f"{name}"
            )
        assert journal(mesh["node-b"], "alpha") == journal(mesh["node-a"], "alpha")
        assert journal(mesh["node-c"], "alpha") == journal(mesh["node-a"], "alpha")
        own = subject("default", "node-a", "alpha")
        held = {
            seq for s, _, seq in stream_envelopes(users.cluster.urls, user="node-b") if s == own
        }
        assert held == set(range(1, 12))  # all of node-a's envelopes, on its own subject
        with mesh["node-a"].client() as client:
            findings = client.get("/api/v1/findings", params={"limit": 1000}).json()["findings"]
        titles = [f["title"] for f in findings if f["agent"] == "node-a"]
        assert any(
            t.startswith("message id of alpha#")
            and t.endswith("taken on the mesh stream by node-x")
            for t in titles
        ), titles
    finally:
        users.kill()


async def _publish_ids(urls: list[str], member: str, journal_name: str, ids: list[str]) -> None:
    """Publish an empty run under each of `ids`, as `member`, on its own subject."""
    nc = await nats.connect(urls, **as_member(member))
    try:
        js = nc.jetstream()
        for identity in ids:
            ack = await js.publish(
                subject("default", member, journal_name), b"[]", headers={"Nats-Msg-Id": identity}
            )
            assert not ack.duplicate
    finally:
        await nc.close()
