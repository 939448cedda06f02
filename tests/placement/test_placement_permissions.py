"""The generated NATS permissions (node/sync/nats_permissions.py) against a real nats-server
with the mesh's users: each node's user can do all the placement code does (lease, advert,
component) and not write another node's advert nor wipe a bucket."""

from __future__ import annotations

import asyncio
import hashlib
import logging

import nats
import pytest
from nats.js.errors import APIError, NoStreamResponseError

from node.placement.adverts import NodeAdverts, Offer
from node.placement.components import ComponentStore
from node.placement.leases import LeaseBook
from node.sync.nats_subjects import Bucket, bucket_name, kv_subject, token
from tests.nats_support import MeshUsers
from tests.placement.support import jetstream, mesh_section

pytestmark = pytest.mark.timeout(120)
NAMES = ["node-a", "node-b", "node-c"]


@pytest.fixture
def users(tmp_path):
    server = MeshUsers(tmp_path / "users", NAMES).start()
    yield server
    server.kill()


async def test_each_nodes_user_can_lease_advertise_and_share_components(users, tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    url = [users.server.url]
    mesh_a = mesh_section(url, "node-a", lease_ttl_secs=2.0, advert_interval_secs=0.5)
    mesh_b = mesh_section(url, "node-b", lease_ttl_secs=2.0, advert_interval_secs=0.5)
    data = b"\0asm" + bytes(range(256)) * 1200
    sha = hashlib.sha256(data).hexdigest()
    async with jetstream(mesh_a, "node-a") as js_a, jetstream(mesh_b, "node-b") as js_b:
        # node-a creates every bucket, takes and renews a lease, advertises, shares a component
        leases_a = LeaseBook("node-a", mesh_a)
        adverts_a = NodeAdverts("node-a", mesh_a, Offer(("payments",), ("http_fetch",)), int)
        components_a = ComponentStore(mesh_a, 1 << 20)
        for part in (leases_a, adverts_a, components_a):
            await part.attach(js_a)
        lease = await leases_a.acquire("alpha", 0)
        assert lease is not None
        assert await leases_a.renew("alpha") is True
        await adverts_a.put()
        assert await components_a.put(data, sha) is True

        # node-b (its own user) sees all of it and takes the lease over once released
        leases_b = LeaseBook("node-b", mesh_b)
        adverts_b = NodeAdverts("node-b", mesh_b, Offer((), ("http_fetch",)), int)
        components_b = ComponentStore(mesh_b, 1 << 20)
        for part in (leases_b, adverts_b, components_b):
            await part.attach(js_b)
        view = await leases_b.holder("alpha")
        assert view is not None and view.holder == "node-a"
        assert await leases_b.acquire("alpha", 1) is None
        await adverts_b.put()
        assert set(await adverts_b.live()) == {"node-a", "node-b"}
        fetched = await components_b.fetch(sha, tmp_path / "b" / "alpha.wasm")
        assert fetched.read_bytes() == data
        assert await leases_a.release("alpha") is True
        assert await leases_b.acquire("alpha", 1) is not None
        await adverts_a.withdraw()
        assert set(await adverts_b.live()) == {"node-b"}

        # refused: node-a writing node-b's advert; a roll-up that would wipe the leases
        js_strict = js_a._nc.jetstream(timeout=1)
        with pytest.raises((nats.errors.TimeoutError, NoStreamResponseError)):
            await js_strict.publish(
                kv_subject(bucket_name("default", Bucket.NODES), token("node-b")), b"{}"
            )
        with pytest.raises(APIError):
            await js_strict.publish(
                kv_subject(bucket_name("default", Bucket.LEASES), token("beta")),
                b"{}",
                headers={"Nats-Rollup": "all"},
            )
        assert (await leases_b.holder("alpha")) is not None  # still there
        await asyncio.sleep(0.1)
    violations = [r for r in caplog.records if "permissions violation" in r.getMessage().lower()]
    # exactly the one refused publish (node-b's advert); nothing the placement code sent
    assert len(violations) == 1, violations
    assert f"mesh_default_nodes.{token('node-b')}" in violations[0].getMessage().lower()
