"""Several pushes in flight to one peer (`[sync] pushes_in_flight`): a real receiving node process
behind a real HTTP relay that reorders the replies or spoils one envelope of the second push.

Outstanding pushes hold disjoint journals, so they may complete in any order; a rejection in one
of them sends only its own journals back to the peer's heads, and the mesh still converges to
identical journals without a gap, a duplicate or a finding.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import httpx
import pytest
from aiohttp import web

from eventstore.keys import load_or_create_key, public_key_multibase
from eventstore.store import NewEvent
from node.app import build_app
from node.context import CONTEXT
from node.ops import polling
from node.sync.service import SYNC
from tests.support import READ_TOKEN, NodeProcess, auth, make_config, write_config
from tests.sync_support import SYNC_TUNING, peer_token, peer_toml

pytestmark = pytest.mark.timeout(120)

JOURNALS = {f"bulk-{i}": 150 for i in range(6)}
TUNING = SYNC_TUNING.replace("batch_size = 200", "batch_size = 100") + "pushes_in_flight = 2\n"


@dataclass
class Relay:
    """Forwards everything to node-b; of the pushes that carry envelopes, it can hold the first
    until the second is answered, and spoil the signature of one envelope of the second."""

    target: str
    hold_first: bool = False
    spoil_second: bool = False
    pushes: list[set[str]] = field(default_factory=list)  # journals of each push, in order
    replies: list[dict] = field(default_factory=list)  # node-b's answers, in completion order
    outstanding: list[set[str]] = field(default_factory=list)
    overlaps: list[tuple[set[str], set[str]]] = field(default_factory=list)
    most_outstanding: int = 0
    second_answered: asyncio.Event = field(default_factory=asyncio.Event)

    async def forward(self, request: web.Request) -> web.Response:
        body = await request.read()
        journals: set[str] = set()
        number = -1
        if request.path == "/api/v1/sync/envelopes" and request.method == "POST":
            push = json.loads(body)
            journals = {e["agent"] for e in push["envelopes"]}
        if journals:
            number = len(self.pushes)
            self.pushes.append(journals)
            for other in self.outstanding:
                self.overlaps.append((journals, other))
            self.outstanding.append(journals)
            self.most_outstanding = max(self.most_outstanding, len(self.outstanding))
            if number == 0 and self.hold_first:
                # a window of one never sends the second: then the first goes on
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.second_answered.wait(), 5)
            if number == 1 and self.spoil_second:
                push["envelopes"][-1]["signature"] = spoiled(push["envelopes"][-1]["signature"])
                body = json.dumps(push).encode()
        try:
            headers = {
                k: v
                for k, v in request.headers.items()
                if k.lower() not in ("host", "content-length")
            }
            async with (
                aiohttp.ClientSession() as http,
                http.request(
                    request.method, self.target + request.path_qs, data=body, headers=headers
                ) as answer,
            ):
                reply = await answer.read()
                status, kind = answer.status, answer.content_type
        except aiohttp.ClientError:  # node-b stopped (the test's end)
            return web.Response(status=502)
        finally:
            if journals:
                self.outstanding.remove(journals)
        if journals:
            self.replies.append(json.loads(reply))
            if number == 1:
                self.second_answered.set()
        return web.Response(body=reply, status=status, content_type=kind)


def spoiled(signature: str) -> str:
    raw = bytearray(base64.b64decode(signature.removeprefix("ed25519:")))
    raw[0] ^= 0xFF
    return "ed25519:" + base64.b64encode(bytes(raw)).decode()


@pytest.fixture
async def mesh(tmp_path: Path, aiohttp_server, aiohttp_client):
    """node-a in this process, pushing through a relay to node-b, a real node process."""
    a_key = load_or_create_key(tmp_path / "a" / "data")
    b_key = load_or_create_key(tmp_path / "b" / "data")
    b_config = write_config(
        tmp_path / "b",
        SYNC_TUNING
        + peer_toml(
            "node-a",
            "http://127.0.0.1:9",  # node-b has nothing of its own to push
            accepts=peer_token("node-a", "node-b"),
            presents=peer_token("node-b", "node-a"),
            public_key=public_key_multibase(a_key.verify_key),
        ),
        name="node-b",
    )
    node_b = NodeProcess(b_config).start()
    relay = Relay(node_b.url)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", relay.forward)
    server = await aiohttp_server(app)
    a_config = make_config(
        tmp_path / "a",
        TUNING
        + peer_toml(
            "node-b",
            str(server.make_url("")).rstrip("/"),
            accepts=peer_token("node-b", "node-a"),
            presents=peer_token("node-a", "node-b"),
            public_key=public_key_multibase(b_key.verify_key),
        ),
        name="node-a",
    )
    client = await aiohttp_client(build_app(a_config))
    try:
        yield relay, client, node_b
    finally:
        node_b.terminate()


async def write_journals(client) -> None:
    """All in one commit, so the replicator's first batches see every journal."""
    await client.app[CONTEXT].store.append_many(
        [
            NewEvent(stream, "finding", {"severity": "info", "title": f"{stream} #{n}"})
            for stream, count in JOURNALS.items()
            for n in range(count)
        ]
    )


async def held_by_b(node_b: NodeProcess) -> dict[str, tuple[int, str]]:
    """node-b's (seq, hash) of the last envelope of each journal."""
    out = {}
    async with httpx.AsyncClient(base_url=node_b.url, headers=auth(READ_TOKEN)) as http:
        for stream in JOURNALS:
            r = await http.get("/api/v1/sync/convergence", params={"agent": stream})
            out[stream] = r.json()["local_seq"]
    return out


async def converge(client, node_b: NodeProcess) -> None:
    async def done() -> bool:
        return await held_by_b(node_b) == JOURNALS

    replicator = client.app[SYNC].replicators[0]
    try:
        await polling.until(done, 60, "node-b holds every journal")
    except polling.DeadlineExceeded as e:
        raise AssertionError(f"{e}; replicator: {replicator.last_error}") from None


async def assert_identical(client, node_b: NodeProcess) -> None:
    """Every envelope node-b holds is node-a's, seq by seq (no gap, no duplicate)."""
    store = client.app[CONTEXT].store
    async with httpx.AsyncClient(
        base_url=node_b.url, headers={"Authorization": f"Bearer {peer_token('node-a', 'node-b')}"}
    ) as http:
        for stream, count in JOURNALS.items():
            r = await http.get("/api/v1/sync/envelopes", params={"agent": stream, "limit": 1000})
            theirs = [(e["seq"], e["payload_hash"]) for e in r.json()["envelopes"]]
            ours = [(e.seq, e.payload_hash) for e in store.read_stream(stream, 0, 1000)]
            assert len(ours) == count
            assert theirs == ours, stream


async def test_two_pushes_in_flight_complete_out_of_order_and_converge(mesh):
    relay, client, node_b = mesh
    relay.hold_first = True
    await write_journals(client)
    await converge(client, node_b)
    await assert_identical(client, node_b)
    assert relay.most_outstanding == 2
    assert not [pair for pair in relay.overlaps if pair[0] & pair[1]]  # disjoint journals
    # the first push was answered after the second (out of order), both in full
    answered = [set(reply["heads"]) for reply in relay.replies]  # in order of completion
    assert answered.index(relay.pushes[1]) < answered.index(relay.pushes[0])
    assert all(reply["rejected"] == 0 for reply in relay.replies)


async def test_a_rejection_in_the_second_push_resumes_only_its_journals(mesh):
    relay, client, node_b = mesh
    relay.spoil_second = True
    await write_journals(client)
    await converge(client, node_b)
    await assert_identical(client, node_b)
    assert relay.most_outstanding == 2
    rejected = [reply for reply in relay.replies if reply["rejected"]]
    assert len(rejected) == 1
    assert [r["reason"] for r in rejected[0]["rejections"]] == ["bad_signature"]
    # its journals were pushed again from node-b's heads; nothing else was rejected, so
    # neither a gap nor a duplicate came of the push that stayed in flight meanwhile
    assert relay.pushes[1] <= set().union(*relay.pushes[2:])
    async with httpx.AsyncClient(base_url=node_b.url, headers=auth(READ_TOKEN)) as http:
        body = (await http.get("/api/v1/findings", params={"limit": 1000})).json()
    assert [f for f in body["findings"] if f["severity"] == "critical"] == []
