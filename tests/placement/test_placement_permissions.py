"""The generated NATS permissions (node/sync/nats/permissions.py) against a real nats-server
with the mesh's users: each node's user can do all the placement code does (lease, advert,
component) and not write or delete another node's lease or advert, nor wipe a bucket."""

from __future__ import annotations

import asyncio
import hashlib
import logging

import nats
import pytest
from nacl.signing import SigningKey
from nats.js.errors import APIError, NoStreamResponseError

from node.placement.adverts import NodeAdverts
from node.placement.components import ComponentStore
from node.placement.leases import LeaseBook, LeaseRecord, lease_key, sign_record
from node.sync.nats.subjects import Bucket, bucket_name, kv_subject, token
from tests.nats_support import MeshUsers
from tests.placement.support import jetstream, mesh_section

pytestmark = pytest.mark.timeout(120)
NAMES = ["node-a", "node-b", "node-c"]
KEYS = {name: SigningKey(bytes([i + 1]) * 32) for i, name in enumerate(NAMES)}


def lookup(node: str):
    return KEYS[node].verify_key if node in KEYS else None


@pytest.fixture
def users(tmp_path):
    server = MeshUsers(tmp_path / "users", NAMES).start()
    yield server
    server.kill()


async def test_each_nodes_user_can_lease_advertise_and_share_components(users, tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    url = [users.server.url]
    mesh_a = mesh_section(url, "node-a", lease_ttl_secs=30.0, advert_interval_secs=0.5)
    mesh_b = mesh_section(url, "node-b", lease_ttl_secs=30.0, advert_interval_secs=0.5)
    data = b"\0asm" + bytes(range(256)) * 1200
    sha = hashlib.sha256(data).hexdigest()
    async with jetstream(mesh_a, "node-a") as js_a, jetstream(mesh_b, "node-b") as js_b:
        # node-a creates every bucket, takes and renews a lease, advertises, shares a component
        leases_a = LeaseBook("node-a", mesh_a, KEYS["node-a"], lookup)
        adverts_a = NodeAdverts("node-a", mesh_a, lambda: ["alpha"], int)
        components_a = ComponentStore(mesh_a, 1 << 20)
        for part in (leases_a, adverts_a, components_a):
            await part.attach(js_a)
        await leases_a.acquire("alpha", 0)
        assert await leases_a.renew("alpha") is True
        await adverts_a.put()
        assert await components_a.put(data, sha) is True

        # node-b (its own user) sees all of it and claims the next epoch under its own key
        leases_b = LeaseBook("node-b", mesh_b, KEYS["node-b"], lookup)
        adverts_b = NodeAdverts("node-b", mesh_b, list, int)
        components_b = ComponentStore(mesh_b, 1 << 20)
        for part in (leases_b, adverts_b, components_b):
            await part.attach(js_b)
        view = await leases_b.peek("alpha", "node-a")
        assert view is not None and view.holder == "node-a"
        await adverts_b.put()
        assert set(await adverts_b.live()) == {"node-a", "node-b"}
        fetched = await components_b.fetch(sha, tmp_path / "b" / "alpha.wasm")
        assert fetched.read_bytes() == data
        assert await leases_a.release("alpha") is True
        await leases_b.acquire("alpha", 1)
        assert [v.holder for v in await leases_a.contenders("alpha", NAMES, 1)] == ["node-b"]
        await adverts_a.withdraw()
        assert set(await adverts_b.live()) == {"node-b"}

        # refused: node-a writing node-b's advert, writing or deleting node-b's lease, and a
        # roll-up that would wipe the leases
        js_strict = js_a._nc.jetstream(timeout=1)
        leases = bucket_name("default", Bucket.LEASES)
        forged = sign_record(KEYS["node-a"], LeaseRecord("alpha", "node-b", 9, 0.0))
        for subject, value, headers in (
            (kv_subject(bucket_name("default", Bucket.NODES), token("node-b")), b"{}", None),
            (kv_subject(leases, lease_key("alpha", "node-b")), forged, None),
            (kv_subject(leases, lease_key("alpha", "node-b")), b"", {"KV-Operation": "DEL"}),
        ):
            with pytest.raises((nats.errors.TimeoutError, NoStreamResponseError)):
                await js_strict.publish(subject, value, headers=headers)
        with pytest.raises(APIError):
            await js_strict.publish(
                kv_subject(leases, lease_key("beta", "node-a")),
                b"{}",
                headers={"Nats-Rollup": "all"},
            )
        assert (await leases_b.peek("alpha", "node-b")).epoch == 1  # still there
        await asyncio.sleep(0.1)
    violations = [r for r in caplog.records if "permissions violation" in r.getMessage().lower()]
    # exactly the three refused publishes (node-b's advert and lease); nothing the placement
    # code sent
    assert len(violations) == 3, violations
    assert f"mesh_default_nodes.{token('node-b')}" in violations[0].getMessage().lower()
    assert all(token("node-b") in v.getMessage() for v in violations)
