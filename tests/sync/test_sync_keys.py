"""Peer keys learned from the peer's DID document on first contact, pinned, never replaced."""

from __future__ import annotations

from aiohttp import web
from nacl.signing import SigningKey

from eventstore.keys import public_key_multibase
from node.app import build_app
from node.context import CONTEXT
from projections.entries import Findings
from projections.peers import PeerBook
from tests.polling import until
from tests.support import READ_TOKEN, auth, make_config
from tests.sync_support import SYNC_TUNING, peer_token, peer_toml, signed_chain

PEER_KEY = SigningKey(b"\x04" * 32)
OTHER_KEY = SigningKey(b"\x05" * 32)


class FakePeer:
    """Serves a DID document and answers probes; can be told to present another key or fail."""

    def __init__(self) -> None:
        self.key = PEER_KEY
        self.failing = False
        self.did_requests = 0
        self.app = web.Application()
        self.app.router.add_get("/.well-known/did.json", self.did)
        self.app.router.add_post("/api/v1/sync/envelopes", self.push)

    async def did(self, request: web.Request) -> web.Response:
        self.did_requests += 1
        return web.json_response(
            {
                "@context": "https://www.w3.org/ns/did/v1",
                "id": "did:web:peer",
                "verificationMethod": [
                    {
                        "id": "did:web:peer#key-1",
                        "type": "Ed25519VerificationKey2020",
                        "controller": "did:web:peer",
                        "publicKeyMultibase": public_key_multibase(self.key.verify_key),
                    }
                ],
                "authentication": ["did:web:peer#key-1"],
            }
        )

    async def push(self, request: web.Request) -> web.Response:
        if self.failing:
            return web.json_response({"title": "down"}, status=503)
        body = await request.json()
        return web.json_response({"accepted": len(body["envelopes"]), "rejected": 0, "heads": {}})


def config_with_peer(tmp_path, port: int, token: str, tuning: str):
    """This node (node-a) with the fake peer node-b: node-b may push with `token`."""
    return make_config(
        tmp_path,
        tuning
        + peer_toml(
            "node-b",
            f"http://127.0.0.1:{port}",
            accepts=token,
            presents=peer_token("node-a", "node-b"),
        ),
    )


async def test_key_from_did_on_first_contact_is_pinned_and_a_change_is_refused(
    aiohttp_server, aiohttp_client, tmp_path
):
    fake = FakePeer()
    server = await aiohttp_server(fake.app)
    token = peer_token("node-b", "node-a")
    config = config_with_peer(tmp_path, server.port, token, SYNC_TUNING)
    app = build_app(config)
    client = await aiohttp_client(app)
    book = app[CONTEXT].projections.get(PeerBook)
    await until(lambda: "node-b" in book.pins)
    assert book.pins["node-b"] == public_key_multibase(PEER_KEY.verify_key)

    response = await client.post(
        "/api/v1/sync/envelopes",
        json={"peer_id": "node-b", "envelopes": signed_chain(PEER_KEY, "node-b", "scout", 2)},
        headers=auth(token),
    )
    assert (await response.json())["accepted"] == 2

    # The peer now presents another key: on the next contact it is refused and reported.
    fake.key, fake.failing = OTHER_KEY, True
    requests = fake.did_requests
    await until(lambda: fake.did_requests > requests)
    fake.failing = False
    findings = app[CONTEXT].projections.get(Findings)
    await until(
        lambda: any(
            i.startswith("node-a/key-changed/node-b/") for i in findings.snapshot()["incidents"]
        )
    )
    assert book.pins["node-b"] == public_key_multibase(PEER_KEY.verify_key)
    findings = await (await client.get("/api/v1/findings", headers=auth(READ_TOKEN))).json()
    critical = [f for f in findings["findings"] if f["severity"] == "critical"]
    assert len(critical) == 1 and critical[0]["agent"] == "node-a"
    assert public_key_multibase(OTHER_KEY.verify_key) in critical[0]["detail"]

    forged = signed_chain(OTHER_KEY, "node-b", "scout2", 1)
    response = await client.post(
        "/api/v1/sync/envelopes",
        json={"peer_id": "node-b", "envelopes": forged},
        headers=auth(token),
    )
    body = await response.json()
    assert body["rejected"] == 1 and body["rejections"][0]["reason"] == "bad_signature"


async def test_an_unknown_origin_that_is_a_peer_is_looked_up_on_receipt(
    aiohttp_server, aiohttp_client, tmp_path
):
    fake = FakePeer()
    fake.failing = True  # our replicator cannot reach it, but its DID document is there
    server = await aiohttp_server(fake.app)
    token = peer_token("node-b", "node-a")
    tuning = SYNC_TUNING.replace("backoff_max_secs = 0.5", "backoff_max_secs = 60")
    config = config_with_peer(tmp_path, server.port, token, tuning)
    client = await aiohttp_client(build_app(config))
    response = await client.post(
        "/api/v1/sync/envelopes",
        json={"peer_id": "node-b", "envelopes": signed_chain(PEER_KEY, "node-b", "scout", 1)},
        headers=auth(token),
    )
    body = await response.json()
    assert body["accepted"] == 1, body
