"""What this node reads from a peer is bounded: a fake peer (a real aiohttp server) answering
with oversized DID documents and push replies, or reporting heads of journals it made up."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from aiohttp import web
from nacl.signing import SigningKey

from eventstore.keys import public_key_multibase
from node.app import build_app
from node.context import CONTEXT
from node.ops import polling
from node.sync.keys import fetch_did_keys
from node.sync.service import SYNC
from node.sync.wire import MAX_DID_BYTES, MAX_REPLY_BYTES
from projections.peers import PeerBook
from tests.support import READ_TOKEN, auth, make_config
from tests.sync_support import SYNC_TUNING, peer_token, peer_toml

PEER_KEY = SigningKey(b"\x05" * 32)


def did(key_text: str, padding: int = 0) -> dict:
    return {"verificationMethod": [{"publicKeyMultibase": key_text}], "pad": "x" * padding}


async def fake_peer(aiohttp_server, *, did_doc: dict, reply: bytes):
    async def get_did(_: web.Request) -> web.Response:
        return web.json_response(did_doc)

    async def post_push(_: web.Request) -> web.Response:
        return web.Response(body=reply, content_type="application/json")

    app = web.Application()
    app.router.add_get("/.well-known/did.json", get_did)
    app.router.add_post("/api/v1/sync/envelopes", post_push)
    return await aiohttp_server(app)


async def test_a_did_document_over_the_cap_is_not_read(aiohttp_server):
    key_text = public_key_multibase(PEER_KEY.verify_key)
    small = await fake_peer(aiohttp_server, did_doc=did(key_text), reply=b"{}")
    huge = await fake_peer(aiohttp_server, did_doc=did(key_text, MAX_DID_BYTES), reply=b"{}")
    async with aiohttp.ClientSession() as http:
        assert await fetch_did_keys(http, str(small.make_url(""))) == (key_text, frozenset())
        assert await fetch_did_keys(http, str(huge.make_url(""))) is None


async def node_with_peer(tmp_path, aiohttp_client, peer_url: str):
    extra = SYNC_TUNING + peer_toml(
        "node-b",
        peer_url,
        accepts=peer_token("node-b", "node-a"),
        presents=peer_token("node-a", "node-b"),
        public_key=public_key_multibase(PEER_KEY.verify_key),
    )
    return await aiohttp_client(build_app(make_config(tmp_path, extra)))


async def replicator_state(client, condition, timeout: float = 5.0):
    replicator = client.app[SYNC].replicators[0]
    try:
        await polling.until(lambda: condition(replicator), timeout, "the replicator's state")
    except polling.DeadlineExceeded as e:
        raise AssertionError(f"{e}; last error: {replicator.last_error}") from None
    return replicator


async def test_a_push_reply_over_the_cap_is_refused_and_retried(
    tmp_path, aiohttp_server, aiohttp_client
):
    body = b'{"accepted": 0, "rejected": 0, "heads": {}, "pad": "' + b"x" * MAX_REPLY_BYTES + b'"}'
    peer = await fake_peer(aiohttp_server, did_doc={}, reply=body)
    client = await node_with_peer(tmp_path, aiohttp_client, str(peer.make_url("")).rstrip("/"))
    replicator = await replicator_state(client, lambda r: "over" in r.last_error)
    assert not replicator.connected
    assert "8388608" in replicator.last_error
    # and the node itself is unaffected
    assert (await client.get("/api/v1/findings", headers=auth(READ_TOKEN))).status == 200


async def test_heads_a_peer_reports_are_kept_only_for_journals_held_here(
    tmp_path, aiohttp_server, aiohttp_client
):
    made_up = {f"invented-{i}": 10**12 for i in range(500)}
    reply = {"accepted": 0, "rejected": 0, "heads": {**made_up, "reporter": 10**12}}
    peer = await fake_peer(aiohttp_server, did_doc={}, reply=json.dumps(reply).encode())
    client = await node_with_peer(tmp_path, aiohttp_client, str(peer.make_url("")).rstrip("/"))
    await client.app[CONTEXT].store.append("reporter", "finding", {"title": "x"})
    await replicator_state(client, lambda r: r.connected and "reporter" in r.acked)
    sync = client.app[SYNC]
    await asyncio.sleep(0.2)  # a probe or two, then the ack recorder's flush
    await sync.acks.flush()
    acks = client.app[CONTEXT].projections.get(PeerBook).acks.get("node-b", {})
    assert not [s for s in acks if s.startswith("invented-")]
    assert acks.get("reporter") == 1  # never beyond this node's head


async def test_a_pull_acks_only_journals_held_here(client_with_peer):
    client = client_with_peer
    token = {"Authorization": f"Bearer {peer_token('node-b', 'node-a')}"}
    for agent in ("never-seen", "also-not"):
        response = await client.get(
            "/api/v1/sync/envelopes", params={"agent": agent, "since": "5"}, headers=token
        )
        assert response.status == 200
    sync = client.app[SYNC]
    await sync.acks.flush()
    acks = client.app[CONTEXT].projections.get(PeerBook).acks.get("node-b", {})
    assert "never-seen" not in acks and "also-not" not in acks


@pytest.fixture
async def client_with_peer(tmp_path, aiohttp_client):
    return await node_with_peer(tmp_path, aiohttp_client, "http://127.0.0.1:9")
