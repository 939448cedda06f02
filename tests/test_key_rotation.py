"""Node key rotation: a signed event, peers that follow it, and audits that know every key."""

from __future__ import annotations

import httpx
import pytest

from eventstore.keys import KEY_FILE, load_key, public_key_multibase
from tests.support import run_cli
from tests.test_sync_mesh import (
    Mesh,
    assert_audits_pass,
    assert_same_everywhere,
    post_findings,
    wait_converged,
)

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def mesh(tmp_path):
    made = Mesh(tmp_path, ["node-a", "node-b"])
    yield made
    made.kill_all()


def node_key(mesh: Mesh, name: str) -> str:
    return public_key_multibase(load_key(mesh[name].config.data_path / KEY_FILE).verify_key)


def critical_findings(mesh: Mesh, name: str) -> list[dict]:
    with mesh[name].client() as client:
        findings = client.get("/api/v1/findings", params={"limit": 1000}).json()["findings"]
    return [f for f in findings if f["severity"] == "critical"]


def test_rotate_keep_syncing_both_ways_and_audit_everywhere(mesh):
    mesh.start()
    post_findings(mesh["node-a"], "alpha", 10)
    post_findings(mesh["node-b"], "beta", 10)
    wait_converged(mesh, {"alpha": 10, "beta": 10})
    first_key = node_key(mesh, "node-a")

    refused = run_cli("key", "rotate", "--config", str(mesh.paths["node-b"]))
    assert refused.returncode == 1 and "stop the node first" in refused.stderr

    assert mesh["node-a"].terminate() == 0
    rotated = run_cli("key", "rotate", "--config", str(mesh.paths["node-a"]))
    assert rotated.returncode == 0, rotated.stderr
    second_key = node_key(mesh, "node-a")
    assert second_key != first_key and second_key in rotated.stdout
    mesh.start("node-a")

    did = httpx.get(mesh["node-a"].url + "/.well-known/did.json").json()
    current, retired = did["verificationMethod"]
    assert current["publicKeyMultibase"] == second_key and current["id"].endswith("#key-2")
    assert retired["publicKeyMultibase"] == first_key and retired["revoked"]
    assert did["assertionMethod"] == [current["id"]]

    post_findings(mesh["node-a"], "alpha", 10)  # signed by the new key
    post_findings(mesh["node-b"], "beta", 10)
    wait_converged(mesh, {"alpha": 20, "beta": 20, "@node-a": 1})
    assert critical_findings(mesh, "node-a") == critical_findings(mesh, "node-b") == []

    # a second rotation while node-b is down: it catches up through node-a's pushes
    assert mesh["node-b"].terminate() == 0
    assert mesh["node-a"].terminate() == 0
    again = run_cli("key", "rotate", "--config", str(mesh.paths["node-a"]))
    assert again.returncode == 0, again.stderr
    third_key = node_key(mesh, "node-a")
    mesh.start("node-a")
    post_findings(mesh["node-a"], "alpha", 5)
    mesh.start("node-b")
    post_findings(mesh["node-b"], "beta", 5)
    wait_converged(mesh, {"alpha": 25, "beta": 25, "@node-a": 2})
    assert critical_findings(mesh, "node-b") == []
    did = httpx.get(mesh["node-a"].url + "/.well-known/did.json").json()
    assert [m["publicKeyMultibase"] for m in did["verificationMethod"]] == [
        third_key,
        second_key,
        first_key,
    ]
    assert_same_everywhere(mesh, {"alpha": 25, "beta": 25, "@node-a": 2})
    assert_audits_pass(mesh)  # every envelope of alpha, under three keys, on both nodes
