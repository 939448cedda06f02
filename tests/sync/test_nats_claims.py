"""Heads records as claims (node/sync/nats/claims.py), on one in-process node holding journals
that two peers pushed over HTTP: what a record may make this node repair, and demotion."""

from __future__ import annotations

import pytest
from nacl.signing import SigningKey

from eventstore.keys import public_key_multibase
from node.context import CONTEXT
from node.sync.nats.claims import CLAIM_FAILURES_TO_DEMOTE, MAX_UNHELD_CLAIMS, ClaimBook
from node.sync.service import SYNC
from projections.entries import Findings
from tests.support import auth, free_port, make_config
from tests.sync_support import SYNC_TUNING, peer_token, peer_toml, signed_chain

KEYS = {"node-b": SigningKey(b"\x05" * 32), "node-x": SigningKey(b"\x06" * 32)}


@pytest.fixture
def config(tmp_path):
    peers = "".join(
        peer_toml(
            name,
            f"http://127.0.0.1:{free_port()}",
            accepts=peer_token(name, "node-a"),
            presents="unused-token-0000000000",
            public_key=public_key_multibase(key.verify_key),
        )
        for name, key in KEYS.items()
    )
    return make_config(tmp_path, SYNC_TUNING + peers)


async def push(client, peer: str, envelopes: list[dict]) -> None:
    response = await client.post(
        "/api/v1/sync/envelopes",
        json={"peer_id": peer, "envelopes": envelopes},
        headers=auth(peer_token(peer, "node-a")),
    )
    body = await response.json()
    assert response.status == 200 and body["rejected"] == 0, body


async def test_a_peer_s_claims_are_bounded_by_what_it_could_hold(client):
    await push(client, "node-b", signed_chain(KEYS["node-b"], "node-b", "alpha", 3))
    await push(client, "node-x", signed_chain(KEYS["node-x"], "node-x", "evil", 2))
    ctx = client.server.app[CONTEXT]
    claims = ClaimBook(ctx, client.server.app[SYNC].incidents)
    claims.take("node-b", {"alpha": 10})
    fake = {f"fake-{i}": 9 for i in range(MAX_UNHELD_CLAIMS + 500)}
    claims.take(
        "node-x",
        {
            "alpha": 10**9,  # node-b's journal: capped at what node-b itself reports
            "evil": 10**9,  # its own: any seq
            "$peers": 5,  # node-level: never
            "node-a": 4,  # this node's own journal: never
            "node-b": 7,  # node-b's node journal: only node-b may start it
            "@node-b": 3,  # node-b's key journal: the same
            "zero": 0,
            **fake,
        },
    )
    admitted = claims.admitted()
    assert admitted["node-b"] == {"alpha": 10}
    liar = admitted["node-x"]
    assert liar["alpha"] == 10 and liar["evil"] == 10**9
    assert not {"$peers", "node-a", "node-b", "@node-b", "zero"} & set(liar)
    assert sum(1 for j in liar if j.startswith("fake-")) == MAX_UNHELD_CLAIMS
    # what the home claims lifts its relays' caps; without the home's record, our head does
    claims.take("node-b", {})
    claims.take("node-x", {"alpha": 10**9})
    assert claims.admitted()["node-x"] == {"alpha": 3}


async def test_a_peer_whose_claims_do_not_pan_out_is_demoted_and_reported_once(client):
    ctx = client.server.app[CONTEXT]
    claims = ClaimBook(ctx, client.server.app[SYNC].incidents)
    claims.take("node-x", {"evil": 10**9})
    for _ in range(CLAIM_FAILURES_TO_DEMOTE - 1):
        await claims.fell_short("node-x", "evil", 10**9, 0, "TimeoutError")
    await claims.panned_out("node-x")  # a claim that held: the count starts over
    for _ in range(CLAIM_FAILURES_TO_DEMOTE - 1):
        await claims.fell_short("node-x", "evil", 10**9, 0, "TimeoutError")
    assert not claims.demoted("node-x")
    await claims.fell_short("node-x", "evil", 10**9, 0, "TimeoutError")
    assert claims.demoted("node-x")
    assert "node-x" not in claims.admitted() and claims.claim("node-x", "evil") == 0
    for _ in range(2 * CLAIM_FAILURES_TO_DEMOTE):
        await claims.fell_short("node-x", "evil", 10**9, 0, "TimeoutError")
    findings = ctx.projections.get(Findings)
    assert findings.has_incident("node-a/nats-unfounded-heads/node-x")
    response = await client.get("/api/v1/findings", params={"limit": 100}, headers=auth())
    titles = [f["title"] for f in (await response.json())["findings"]]
    assert titles.count("peer node-x reports heads it does not serve") == 1
