"""Node key rotation: a signed event, peers that follow it, and audits that know every key."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from nacl.signing import SigningKey

from eventstore.audit import verify_journals
from eventstore.envelope import Envelope, Event, digest_of, encode_event, sign, utc_now
from eventstore.keychain import KeyChain, RetiredKey
from eventstore.keys import KEY_FILE, load_key, public_key_multibase, write_key
from eventstore.store import EventStore, ForeignEnvelope, ImportStatus
from node.app import open_store
from node.cli.keyrotate import PENDING_KEY_FILE
from node.config.load import load_config
from node.sync.keys import chain_of
from projections.keys import KEY_ROTATED, KeyHistory
from tests.support import run_cli, write_config
from tests.sync.test_sync_mesh import (
    Mesh,
    assert_audits_pass,
    assert_same_everywhere,
    post_findings,
    wait_converged,
)
from tests.sync_support import prefill

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
    # the agents' journals exist before findings are posted about them (404 otherwise)
    prefill(mesh.paths["node-a"], {"alpha": 1})
    prefill(mesh.paths["node-b"], {"beta": 1})
    mesh.start()
    post_findings(mesh["node-a"], "alpha", 9)
    post_findings(mesh["node-b"], "beta", 9)
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


# ----------------------------------------------------------------- in one process
def offline_envelopes(config_path, stream: str) -> list[ForeignEnvelope]:
    config = load_config(config_path)
    store = open_store(config, load_key(config.data_path / KEY_FILE))
    try:
        return [
            ForeignEnvelope(e.stream, e.seq, e.payload, e.signature)
            for e in store.iter_stream(stream)
        ]
    finally:
        store.close_sync()


def envelope_after(
    key: SigningKey, stream: str, last: ForeignEnvelope, origin: str = "node-a"
) -> ForeignEnvelope:
    """The next envelope of `stream` after `last`, signed by `key`."""
    prev = "sha256:" + digest_of(last.payload).hex()
    payload = encode_event(
        Event("finding", utc_now(), origin, prev, {"severity": "low", "title": "next"})
    )
    seq = last.seq + 1
    return ForeignEnvelope(stream, seq, payload, sign(key, stream, seq, digest_of(payload)))


def test_the_key_chain_picks_the_key_of_each_range():
    k0, k1, k2 = (SigningKey(bytes([i]) * 32).verify_key for i in (1, 2, 3))
    chain = KeyChain([RetiredKey(k0, {"a": 3, "@n": 1}), RetiredKey(k1, {"a": 5, "@n": 2})], k2)
    assert [chain.for_envelope("a", seq) for seq in range(1, 8)] == [k0] * 3 + [k1] * 2 + [k2] * 2
    assert chain.for_envelope("@n", 1) == k0 and chain.for_envelope("@n", 2) == k1
    assert chain.for_envelope("b", 1) == k2  # a journal begun after the rotations


async def test_a_peer_accepts_the_new_key_and_refuses_the_old_one_past_the_rotation(tmp_path):
    config_path = write_config(tmp_path / "a", name="node-a")
    await asyncio.to_thread(prefill, config_path, {"alpha": 3})  # it runs its own loop
    data = load_config(config_path).data_path
    old_key = load_key(data / KEY_FILE)
    rotated = await asyncio.to_thread(run_cli, "key", "rotate", "--config", str(config_path))
    assert rotated.returncode == 0, rotated.stderr
    new_key = load_key(data / KEY_FILE)
    alpha = offline_envelopes(config_path, "alpha")
    (rotation,) = offline_envelopes(config_path, "@node-a")

    receiver = EventStore(tmp_path / "b", SigningKey(b"\2" * 32), "node-b")
    receiver.start()
    history, cache = KeyHistory(), {}

    def lookup(origin: str):
        return chain_of(history, origin, cache) or {"node-a": old_key.verify_key}.get(origin)

    try:
        results = await receiver.import_envelopes([*alpha, rotation], lookup)
        assert [r.status for r in results] == [ImportStatus.ACCEPTED] * 4
        history.apply(results[-1].envelope)  # what the node's projection does on commit
        assert history.current("node-a") == public_key_multibase(new_key.verify_key)
        forged = envelope_after(old_key, "alpha", alpha[-1])
        (refused,) = await receiver.import_envelopes([forged], lookup)
        assert refused.status == ImportStatus.BAD_SIGNATURE  # a stolen old key signs nothing new
        (accepted,) = await receiver.import_envelopes(
            [envelope_after(new_key, "alpha", alpha[-1])], lookup
        )
        assert accepted.status == ImportStatus.ACCEPTED
        report = verify_journals(receiver, lookup)
        assert report.failure is None and report.envelopes == 5
    finally:
        await receiver.close()


def test_only_a_nodes_own_key_journal_speaks_for_its_key():
    old, new = SigningKey(b"\4" * 32), SigningKey(b"\5" * 32)
    data = {
        "previous_public_key": public_key_multibase(old.verify_key),
        "new_public_key": public_key_multibase(new.verify_key),
        "heads": {"@node-a": 1},
    }

    def envelope(stream: str, origin: str, payload_data: dict) -> Envelope:
        event = Event(KEY_ROTATED, utc_now(), origin, "", payload_data)
        return Envelope(stream, 1, b"", b"", b"", event, 1)

    history = KeyHistory()
    history.apply(envelope("@node-a", "node-c", data))  # someone else's claim
    history.apply(envelope("alpha", "node-a", data))  # not the key journal
    history.apply(envelope("@node-a", "node-a", {**data, "heads": {"x": "1"}}))
    history.apply(envelope("@node-a", "node-a", {**data, "new_public_key": "zNotAKey"}))
    assert history.rotations == {}
    history.apply(envelope("@node-a", "node-a", data))
    unrelated = {
        **data,
        "previous_public_key": public_key_multibase(SigningKey(b"\6" * 32).verify_key),
    }
    history.apply(envelope("@node-a", "node-a", unrelated))  # does not continue the chain
    assert history.current("node-a") == data["new_public_key"]
    assert len(history.retired("node-a")) == 1


def test_an_interrupted_rotation_blocks_start_and_is_finished_or_discarded(tmp_path):
    config_path = write_config(tmp_path)
    data = load_config(config_path).data_path
    prefill(config_path, {"alpha": 2})
    original = (data / KEY_FILE).read_bytes()
    # crashed after writing the new seed, before the event: discarded, then a fresh rotation
    write_key(data / PENDING_KEY_FILE, SigningKey.generate())
    blocked = run_cli("run", "--config", str(config_path), timeout=60)
    assert blocked.returncode == 2 and "key rotation was interrupted" in blocked.stderr
    assert run_cli("key", "rotate", "--config", str(config_path)).returncode == 0
    assert not (data / PENDING_KEY_FILE).exists()
    rotated = (data / KEY_FILE).read_bytes()
    assert rotated != original
    # crashed after the event, before the rename: the next `key rotate` only renames
    (data / KEY_FILE).rename(data / PENDING_KEY_FILE)
    write_key(data / KEY_FILE, SigningKey(original))
    finished = run_cli("key", "rotate", "--config", str(config_path))
    assert finished.returncode == 0 and "finished an interrupted rotation" in finished.stdout
    assert (data / KEY_FILE).read_bytes() == rotated
    audit = run_cli("audit", "verify", "--config", str(config_path))
    assert audit.returncode == 0, audit.stderr
    # an old key restored over the rotated one would sign what peers reject: no start
    (data / KEY_FILE).unlink()
    write_key(data / KEY_FILE, SigningKey(original))
    stale = run_cli("run", "--config", str(config_path), timeout=60)
    assert stale.returncode == 2 and "the journal says the node key is" in stale.stderr
