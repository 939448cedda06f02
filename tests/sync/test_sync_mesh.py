"""Real nodes on loopback ports replicating to each other, with crashes and outages."""

from __future__ import annotations

import base64
import functools
import re
import time

import httpx
import pytest

from eventstore.keys import load_or_create_key
from harness.mesh import Mesh
from tests import polling
from tests.support import NodeProcess, auth, run_cli
from tests.sync_support import peer_token, prefill, signed_chain

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def mesh_factory(tmp_path):
    meshes: list[Mesh] = []

    def make(names: list[str], **kwargs) -> Mesh:
        meshes.append(Mesh(tmp_path, names, **kwargs))
        return meshes[-1]

    yield make
    for mesh in meshes:
        mesh.kill_all()


# a node that is still starting answers with connection errors: not yet
wait_until = functools.partial(polling.wait_until, retry_on=(httpx.HTTPError,))


def post_findings(node: NodeProcess, agent: str, count: int) -> None:
    with node.client() as client:
        for i in range(count):
            r = client.post(
                "/api/v1/findings", json={"agent": agent, "severity": "low", "title": f"t{i}"}
            )
            assert r.status_code == 201, r.text


def convergence(node: NodeProcess, agent: str) -> dict:
    with node.client() as client:
        r = client.get("/api/v1/sync/convergence", params={"agent": agent})
        assert r.status_code == 200, r.text
        return r.json()


def wait_converged(mesh: Mesh, journals: dict[str, int], timeout: float = 60.0) -> None:
    """Every node holds every journal at the expected head and reports converged."""
    for name, node in mesh.nodes.items():
        for agent, head in journals.items():

            def done(node=node, agent=agent, head=head) -> bool:
                report = convergence(node, agent)
                return report["local_seq"] == head and report["converged"]

            wait_until(done, timeout, f"{agent} to converge on {name}")
            report = convergence(node, agent)
            assert all(p["lag"] == 0 and p["acked_seq"] == head for p in report["peers"]), report


def journal(node: NodeProcess, agent: str) -> list[tuple[int, str, str]]:
    """(seq, payload_hash, signature) of every envelope of one journal, paged."""
    out: list[tuple[int, str, str]] = []
    with node.client() as client:
        while True:
            r = client.get(
                "/api/v1/sync/envelopes", params={"agent": agent, "since": len(out), "limit": 1000}
            )
            page = r.json()["envelopes"]
            out += [(e["seq"], e["payload_hash"], e["signature"]) for e in page]
            if len(page) < 1000:
                return out


def sync_counter(node: NodeProcess) -> float:
    with node.client() as client:
        text = client.get("/api/v1/metrics").text
    return float(re.search(r"^svc_sync_envelopes_total (\S+)$", text, re.M).group(1))


def assert_same_everywhere(mesh: Mesh, journals: dict[str, int]) -> None:
    for agent, head in journals.items():
        copies = {name: journal(node, agent) for name, node in mesh.nodes.items()}
        reference = next(iter(copies.values()))
        assert [seq for seq, _, _ in reference] == list(range(1, head + 1))
        for name, copy in copies.items():
            assert copy == reference, f"{agent} differs on {name}"


def assert_audits_pass(mesh: Mesh) -> None:
    mesh.stop_all()
    for name, path in mesh.paths.items():
        result = run_cli("audit", "verify", "--config", str(path))
        assert result.returncode == 0, f"{name}: {result.stdout}{result.stderr}"
        assert "audit ok" in result.stdout


# ----------------------------------------------------------------- tests
def test_two_nodes_converge_and_replicas_are_read_only(mesh_factory):
    mesh = mesh_factory(["node-a", "node-b"])
    # each node's agent journal exists before findings are posted about it (404 otherwise)
    prefill(mesh.paths["node-a"], {"alpha": 1})
    prefill(mesh.paths["node-b"], {"beta": 1})
    mesh.start()
    post_findings(mesh["node-a"], "alpha", 29)
    post_findings(mesh["node-b"], "beta", 19)
    wait_converged(mesh, {"alpha": 30, "beta": 20})
    assert_same_everywhere(mesh, {"alpha": 30, "beta": 20})

    with mesh["node-b"].client() as client:
        findings = client.get("/api/v1/findings", params={"limit": 1000}).json()["findings"]
        assert {f["agent"] for f in findings} == {"alpha", "beta"}
        # a finding about node-a's agent posted here goes into node-b's own journal (issue 37):
        # the replica of alpha is never written
        r = client.post(
            "/api/v1/findings", json={"agent": "alpha", "severity": "low", "title": "x"}
        )
        assert r.status_code == 201 and "no agent of that name is hosted" in r.json()["note"]
    assert len(journal(mesh["node-b"], "alpha")) == 30
    assert sync_counter(mesh["node-a"]) >= 50  # 30 sent + 20 received
    assert sync_counter(mesh["node-b"]) >= 50
    assert_audits_pass(mesh)


def test_three_nodes_converge_with_identical_journals(mesh_factory):
    mesh = mesh_factory(["node-a", "node-b", "node-c"])
    for name in mesh.nodes:
        prefill(mesh.paths[name], {f"agent-{name}": 1})
    mesh.start()
    for i, name in enumerate(mesh.nodes):
        post_findings(mesh[name], f"agent-{name}", 9 + i)
    expected = {f"agent-{name}": 10 + i for i, name in enumerate(mesh.nodes)}
    wait_converged(mesh, expected)
    assert_same_everywhere(mesh, expected)
    assert_audits_pass(mesh)


def test_kill_9_mid_sync_on_either_side_loses_and_duplicates_nothing(mesh_factory):
    mesh = mesh_factory(["node-a", "node-b"])
    journals = {"bulk-1": 6000, "bulk-2": 4000}
    prefill(mesh.paths["node-a"], journals)
    receiver, sender = mesh["node-b"], mesh["node-a"]
    receiver.start()
    sender.start()

    def heads_on_b() -> int:
        return sum(convergence(receiver, agent)["local_seq"] for agent in journals)

    wait_until(lambda: heads_on_b() >= 1500, what="sync to start")
    receiver.kill()  # receiver dies mid-sync
    time.sleep(0.3)
    receiver.start()
    before = heads_on_b()
    assert before < sum(journals.values()), "sync finished before the kill; grow the journals"
    wait_until(lambda: heads_on_b() >= before + 1500, what="sync to resume")
    sender.kill()  # and now the sender
    time.sleep(0.3)
    sender.start()
    post_findings(sender, "bulk-1", 5)  # and it keeps writing after its restart
    journals["bulk-1"] += 5
    wait_converged(mesh, journals, timeout=120)
    assert_same_everywhere(mesh, journals)
    assert_audits_pass(mesh)


def test_a_peer_down_for_a_while_is_caught_up(mesh_factory):
    mesh = mesh_factory(["node-a", "node-b"])
    prefill(mesh.paths["node-a"], {"alpha": 1})
    mesh.start("node-a")
    post_findings(mesh["node-a"], "alpha", 24)  # node-b never seen yet
    time.sleep(1.5)  # several backoff rounds against a closed port
    mesh.start("node-b")
    wait_converged(mesh, {"alpha": 25})
    mesh["node-b"].terminate()
    post_findings(mesh["node-a"], "alpha", 15)
    time.sleep(1.5)
    assert convergence(mesh["node-a"], "alpha")["peers"][0]["lag"] == 15
    mesh.start("node-b")
    wait_converged(mesh, {"alpha": 40})
    assert_same_everywhere(mesh, {"alpha": 40})
    assert_audits_pass(mesh)


def test_bad_pushes_to_a_real_node_are_each_rejected_and_counted(mesh_factory, tmp_path):
    mesh = mesh_factory(["node-a", "node-b"])
    key_a = load_or_create_key(tmp_path / "node-a" / "data")
    mesh.start("node-b")  # node-a stays down: the test pushes in its name
    b = mesh["node-b"]
    chain = signed_chain(key_a, "node-a", "alpha", 3)
    fork = signed_chain(key_a, "node-a", "alpha", 2, data={"fork": 1})
    stranger = signed_chain(load_or_create_key(tmp_path / "x"), "node-x", "xeno", 1)
    forged = dict(chain[0], signature="ed25519:" + base64.b64encode(b"\0" * 64).decode())
    token = peer_token("node-a", "node-b")
    cases = [
        ([forged], "bad_signature"),
        (stranger, "unknown_origin"),
        ([chain[1]], "gap"),
        (chain[:1], None),
        (chain[:1], "duplicate"),
        (fork[:1], "equivocation"),
    ]
    before = sync_counter(b)
    with httpx.Client(base_url=b.url, headers=auth(token), timeout=30) as client:
        for envelopes, reason in cases:
            r = client.post(
                "/api/v1/sync/envelopes", json={"peer_id": "node-a", "envelopes": envelopes}
            )
            assert r.status_code == 200, r.text
            body = r.json()
            if reason is None:
                assert (body["accepted"], body["rejected"]) == (1, 0)
            else:
                assert (body["accepted"], body["rejected"]) == (0, 1), body
                assert body["rejections"][0]["reason"] == reason
    assert sync_counter(b) == before + len(cases)
    with b.client() as client:
        findings = client.get("/api/v1/findings").json()["findings"]
    assert [f["severity"] for f in findings if f["agent"] == "node-b"] == ["critical"]
    assert_audits_pass(mesh)


def test_keys_learned_from_did_documents(mesh_factory):
    mesh = mesh_factory(["node-a", "node-b"], with_keys=False)
    prefill(mesh.paths["node-a"], {"alpha": 1})
    prefill(mesh.paths["node-b"], {"beta": 1})
    mesh.start()
    assert httpx.get(mesh["node-a"].url + "/.well-known/did.json").status_code == 200
    post_findings(mesh["node-a"], "alpha", 4)
    post_findings(mesh["node-b"], "beta", 4)
    wait_converged(mesh, {"alpha": 5, "beta": 5})
    assert_audits_pass(mesh)
