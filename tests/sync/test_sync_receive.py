"""POST/GET /api/v1/sync/envelopes and the convergence report, on one in-process node."""

from __future__ import annotations

import base64

import msgspec
import pytest
from nacl.signing import SigningKey

from eventstore.envelope import digest_of
from eventstore.keys import public_key_multibase
from node.app import build_app
from node.context import CONTEXT
from node.sync.keyring import key_resolver
from node.sync.service import SYNC
from projections.entries import Findings
from projections.peers import PeerBook
from tests.polling import until
from tests.support import READ_TOKEN, auth, free_port, make_config
from tests.sync_support import SYNC_TUNING, peer_token, peer_toml, signed_chain

PEER_KEY = SigningKey(b"\x02" * 32)
STRANGER_KEY = SigningKey(b"\x03" * 32)
B_TOKEN = peer_token("node-b", "node-a")


def peer_section(key: SigningKey | None = PEER_KEY) -> str:
    return SYNC_TUNING + peer_toml(
        "node-b",
        f"http://127.0.0.1:{free_port()}",
        accepts=B_TOKEN,
        presents="unused-token-0000000000",
        public_key=public_key_multibase(key.verify_key) if key else "",
    )


@pytest.fixture
def config(tmp_path):
    return make_config(tmp_path, peer_section())


async def push(client, envelopes, *, peer_id="node-b", token=B_TOKEN):
    response = await client.post(
        "/api/v1/sync/envelopes",
        json={"peer_id": peer_id, "envelopes": envelopes},
        headers=auth(token),
    )
    return response.status, await response.json()


def reasons(body) -> list[str]:
    return [r["reason"] for r in body["rejections"]]


async def sync_counter(client) -> float:
    text = await (await client.get("/api/v1/metrics", headers=auth(READ_TOKEN))).text()
    line = next(x for x in text.splitlines() if x.startswith("svc_sync_envelopes_total "))
    return float(line.split()[1])


async def test_a_valid_push_is_stored_folded_and_acknowledged(client):
    chain = signed_chain(PEER_KEY, "node-b", "scout", 3)
    status, body = await push(client, chain)
    assert status == 200
    assert body["accepted"] == 3 and body["rejected"] == 0
    assert body["heads"] == {"scout": 3}
    # the replica feeds the local read models
    findings = await (await client.get("/api/v1/findings", headers=auth(READ_TOKEN))).json()
    assert [f["title"] for f in findings["findings"]] == ["scout #1", "scout #2", "scout #3"]
    assert {f["agent"] for f in findings["findings"]} == {"scout"}
    # and is served as read envelopes, byte-identical to what was pushed
    ctx = client.server.app[CONTEXT]
    stored = ctx.store.read_stream("scout")
    assert [base64.b64encode(e.payload).decode() for e in stored] == [e["payload"] for e in chain]
    assert await sync_counter(client) == 3


async def test_each_kind_of_bad_envelope_is_rejected_and_counted(client):
    chain = signed_chain(PEER_KEY, "node-b", "scout", 4)
    forged = dict(chain[0], signature="ed25519:" + base64.b64encode(b"\1" * 64).decode())
    stranger = signed_chain(STRANGER_KEY, "node-x", "other", 1)[0]
    status, body = await push(client, [forged, stranger, chain[0], chain[2]])
    assert status == 200
    assert body["accepted"] == 1 and body["rejected"] == 3
    assert reasons(body) == ["bad_signature", "unknown_origin", "gap"]
    assert [r["index"] for r in body["rejections"]] == [0, 1, 3]

    status, body = await push(client, [chain[0], chain[1]])
    assert (body["accepted"], body["rejected"], reasons(body)) == (1, 1, ["duplicate"])
    assert body["heads"] == {"scout": 2}
    assert await sync_counter(client) == 6


async def test_equivocation_is_rejected_and_reported_once_as_critical(client):
    ours = signed_chain(PEER_KEY, "node-b", "scout", 2)
    fork = signed_chain(PEER_KEY, "node-b", "scout", 2, data={"forked": True})
    await push(client, ours)
    for _ in range(2):
        status, body = await push(client, fork[1:])
        assert status == 200
        assert (body["accepted"], body["rejected"], reasons(body)) == (0, 1, ["equivocation"])
    findings = await (await client.get("/api/v1/findings", headers=auth(READ_TOKEN))).json()
    critical = [f for f in findings["findings"] if f["severity"] == "critical"]
    assert len(critical) == 1
    assert critical[0]["agent"] == "node-a"  # the node's own (replicated) journal
    assert "equivocation in journal scout at seq 2" in critical[0]["title"]
    assert "node-b" in critical[0]["detail"]


async def test_malformed_envelopes_inside_a_valid_body_are_rejected_one_by_one(client):
    good = signed_chain(PEER_KEY, "node-b", "scout", 1)[0]
    bad = [
        "not an object",
        {"seq": 1, "agent": "scout"},
        dict(good, seq=-1),
        dict(good, seq=2**70),
        dict(good, payload="%%% not base64"),
        dict(good, signature="rsa:abc"),
        dict(good, agent="bad name!"),
        dict(good, payload=base64.b64encode(b"\xc1junk").decode()),
        dict(good, agent="$peers"),
    ]
    status, body = await push(client, [*bad, good])
    assert status == 200
    assert body["accepted"] == 1 and body["rejected"] == len(bad)
    assert reasons(body) == ["malformed"] * 8 + ["node_level"]


async def test_a_writer_other_than_the_journals_home_is_refused(client):
    await push(client, signed_chain(PEER_KEY, "node-b", "scout", 1))
    # node-a (this node's own key) cannot append to node-b's journal either
    ctx = client.server.app[CONTEXT]
    first = ctx.store.read_stream("scout")[0]
    intruder = signed_chain(ctx.key, "node-a", "scout", 1, start=2, prev=first.payload_hash)
    _status, body = await push(client, intruder)
    assert reasons(body) == ["foreign_writer"]


async def test_a_batch_staged_before_the_journals_first_commit_cannot_extend_it(client):
    """The NATS consumer stages a batch while the one before commits: screening cannot yet
    know the home of a journal that batch starts, so the writer's transaction decides."""
    ctx = client.server.app[CONTEXT]
    receiver = client.server.app[SYNC].receiver
    chain = signed_chain(PEER_KEY, "node-b", "scout", 3)
    last = "sha256:" + digest_of(base64.b64decode(chain[-1]["payload"])).hex()
    intruder = signed_chain(ctx.key, "node-a", "scout", 1, start=4, prev=last)
    first = await receiver.stage([msgspec.Raw(msgspec.json.encode(e)) for e in chain])
    second = await receiver.stage([msgspec.Raw(msgspec.json.encode(e)) for e in intruder])
    assert second.outcome.rejections == []  # it passed the screening
    assert (await receiver.settle("node-b", first)).accepted == 3
    outcome = await receiver.settle("node-b", second)
    assert [(r.seq, r.reason) for r in outcome.rejections] == [(4, "foreign_writer")]
    assert ctx.store.head("scout").seq == 3


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{not json",
        b"[]",
        b'{"peer_id": "node-b"}',
        b'{"peer_id": 1, "envelopes": []}',
        b'{"peer_id": "node-b", "envelopes": {}}',
    ],
)
async def test_a_malformed_body_is_a_400_problem(client, body):
    response = await client.post(
        "/api/v1/sync/envelopes",
        data=body,
        headers={**auth(B_TOKEN), "Content-Type": "application/json"},
    )
    assert response.status == 400
    assert response.content_type == "application/problem+json"


async def test_peer_id_must_match_the_token_and_scope_is_enforced(client):
    status, _body = await push(client, [], peer_id="node-c")
    assert status == 403
    status, _ = await push(client, [], token=READ_TOKEN, peer_id="reader")
    assert status == 403
    response = await client.post("/api/v1/sync/envelopes", json={"peer_id": "x", "envelopes": []})
    assert response.status == 401


async def test_an_empty_push_is_a_probe_answered_with_every_head(client):
    await push(client, signed_chain(PEER_KEY, "node-b", "scout", 2))
    await client.app[CONTEXT].store.append("local", "finding", {"title": "t"})
    status, body = await push(client, [])
    assert status == 200 and body["accepted"] == 0 and body["rejected"] == 0
    assert body["heads"] == {"scout": 2, "local": 1}


async def test_get_envelopes_reads_pages_and_a_peers_pull_records_its_ack(client):
    for i in range(5):
        await client.app[CONTEXT].store.append("payer", "finding", {"title": f"f{i}"})
    r = await client.get("/api/v1/sync/envelopes", headers=auth(READ_TOKEN))
    assert r.status == 400
    for bad in ("since=-1", "since=x", "limit=1.5"):
        r = await client.get(f"/api/v1/sync/envelopes?agent=payer&{bad}", headers=auth(READ_TOKEN))
        assert r.status == 400, bad
    r = await client.get(
        "/api/v1/sync/envelopes?agent=payer&since=1&limit=2", headers=auth(READ_TOKEN)
    )
    envelopes = (await r.json())["envelopes"]
    assert [e["seq"] for e in envelopes] == [2, 3]
    assert set(envelopes[0]) == {"seq", "agent", "payload_hash", "timestamp", "signature"}
    assert envelopes[0]["payload_hash"].startswith("sha256:")
    assert envelopes[0]["signature"].startswith("ed25519:")
    r = await client.get("/api/v1/sync/envelopes?agent=nobody", headers=auth(READ_TOKEN))
    assert (await r.json()) == {"envelopes": []}
    r = await client.get("/api/v1/sync/envelopes?agent=$peers", headers=auth(READ_TOKEN))
    assert r.status == 400

    report = await convergence(client, "payer")
    assert report["local_seq"] == 5
    assert report["peers"] == [{"peer_id": "node-b", "acked_seq": 0, "lag": 5}]
    assert report["converged"] is False and report["home"] == "node-a"

    r = await client.get("/api/v1/sync/envelopes?agent=payer&since=5", headers=auth(B_TOKEN))
    assert r.status == 200
    report = await wait_for(client, "payer", lambda rep: rep["converged"])
    assert report["peers"] == [{"peer_id": "node-b", "acked_seq": 5, "lag": 0}]


async def test_convergence_needs_an_agent(client):
    r = await client.get("/api/v1/sync/convergence", headers=auth(READ_TOKEN))
    assert r.status == 400
    report = await convergence(client, "unknown")
    assert report["local_seq"] == 0 and report["converged"] is True


async def convergence(client, agent: str) -> dict:
    r = await client.get(f"/api/v1/sync/convergence?agent={agent}", headers=auth(READ_TOKEN))
    assert r.status == 200
    return await r.json()


async def wait_for(client, agent, predicate, timeout: float = 5.0) -> dict:
    """The convergence report once `predicate` holds for it."""

    async def report_if_done() -> dict | None:
        report = await convergence(client, agent)
        return report if predicate(report) else None

    return await until(report_if_done, timeout, what=f"convergence of {agent}")


# ----------------------------------------------------------------- keys and pins
async def test_configured_keys_are_pinned_and_found_by_the_audit(aiohttp_client, config):
    app = build_app(config)
    client = await aiohttp_client(app)
    await push(client, signed_chain(PEER_KEY, "node-b", "scout", 2))
    ctx = app[CONTEXT]
    assert ctx.projections.get(PeerBook).pins == {
        "node-b": public_key_multibase(PEER_KEY.verify_key)
    }
    await client.close()

    # the offline audit finds the pinned key even when the config no longer gives it
    bare = make_config(config.data_path.parent, peer_section(key=None))
    offline = build_app(bare)[CONTEXT]
    try:
        lookup = key_resolver(bare, offline.key, offline.store)
        assert bytes(lookup("node-b")) == bytes(PEER_KEY.verify_key)
    finally:
        offline.store.close_sync()


async def test_a_changed_configured_key_is_refused_with_a_finding(aiohttp_client, config):
    client = await aiohttp_client(build_app(config))
    await push(client, signed_chain(PEER_KEY, "node-b", "scout", 1))
    await client.close()

    changed = make_config(config.data_path.parent, peer_section(key=STRANGER_KEY))
    client = await aiohttp_client(build_app(changed))
    chain = signed_chain(STRANGER_KEY, "node-b", "fresh", 1)
    _status, body = await push(client, chain)
    assert reasons(body) == ["bad_signature"]  # still verified against the pinned key
    findings = await (await client.get("/api/v1/findings", headers=auth(READ_TOKEN))).json()
    critical = [f for f in findings["findings"] if f["severity"] == "critical"]
    assert len(critical) == 1 and "different public key" in critical[0]["title"]


async def test_a_config_key_that_is_not_multibase_stops_the_node(tmp_path):
    from node.config.model import ConfigError

    bad = make_config(
        tmp_path,
        peer_section(key=None).replace(
            'token = "unused-token-0000000000"',
            'token = "unused-token-0000000000"\npublic_key = "zzz"',
        ),
    )
    with pytest.raises(ConfigError, match=r"peers\[0\]\.public_key"):
        build_app(bad)


async def test_the_peer_book_rebuilds_to_the_live_state(client):
    ours = signed_chain(PEER_KEY, "node-b", "scout", 3)
    fork = signed_chain(PEER_KEY, "node-b", "scout", 3, data={"forked": True})
    await push(client, ours)
    await push(client, fork[2:])  # an incident
    await client.get("/api/v1/sync/envelopes?agent=scout&since=3", headers=auth(B_TOKEN))
    ctx = client.server.app[CONTEXT]
    await wait_for(client, "scout", lambda rep: rep["converged"])
    book = ctx.projections.get(PeerBook)
    assert book.pins and book.acks["node-b"]["scout"] == 3
    assert len(ctx.projections.get(Findings).snapshot()["incidents"]) == 1
    rebuilt = ctx.projections.fresh()
    rebuilt.rebuild(ctx.store.iter_chunks())
    for name in ("peers", "findings"):
        assert rebuilt.snapshot()[name] == ctx.projections.snapshot()[name]


async def test_a_node_refuses_to_host_an_agent_whose_journal_is_homed_elsewhere(
    tmp_path, aiohttp_client
):
    from node.app import build_app
    from node.config.model import ConfigError
    from node.context import CONTEXT
    from tests.support import make_config, replicate, tiny_component

    tiny_component(tmp_path / "agent.wasm")
    config = make_config(tmp_path, '[[agents]]\nname = "payer"\ncomponent = "agent.wasm"\n')
    app = build_app(config)
    store = app[CONTEXT].store
    store.start()
    [result] = await replicate(store, "payer", "log", {"level": "info", "message": "from b"})
    assert result.status == "accepted"
    await store.close()

    with pytest.raises(ConfigError, match="'payer' is hosted on node 'node-b'"):
        await aiohttp_client(build_app(config))
