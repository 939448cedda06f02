"""NodeAdverts and ComponentStore against a real nats-server: adverts are put, read back,
checked, and expire; components go round by checksum, anything else is refused, and a
member's forged metas hide nothing."""

from __future__ import annotations

import asyncio
import hashlib
import time

import msgspec
import pytest

from node.config.load import parse_config
from node.placement.adverts import Advert, NodeAdverts, served_domains
from node.placement.components import (
    CHUNK_BYTES,
    MAX_METAS_TRIED,
    ComponentMissing,
    ComponentRefused,
    ComponentStore,
    ObjectOptions,
    ObjectRecord,
    digest_of,
)
from node.sync.nats_subjects import Bucket, bucket_name, kv_subject, token
from tests.nats_support import NatsCluster
from tests.placement.support import jetstream, mesh_section
from tests.polling import until

pytestmark = pytest.mark.timeout(120)
INTERVAL = 0.3


@pytest.fixture
def one_server(tmp_path):
    servers = NatsCluster(tmp_path / "nats", 1).start()
    yield servers
    servers.kill()


def test_a_node_serves_the_domains_it_has_secrets_for(tmp_path):
    config = parse_config(
        {
            "node": {"name": "node-a"},
            "secrets": {"payments": {"api_key": "k-123"}, "mail": {}, "maps": {}},
            "actions": {"send_mail": {"url": "http://127.0.0.1:9/"}},
        }
    )
    environ = {"AGENT_SECRET_MAIL_PASSWORD": "x"}  # mail from the environment; maps: nothing
    assert served_domains(config, environ) == ("mail", "payments")


async def test_adverts_are_put_read_checked_and_expire(one_server):
    mesh = mesh_section(one_server.urls, advert_interval_secs=INTERVAL, agent_slots=5)
    hosting = {"node-a": 2, "node-b": 0}
    async with jetstream(mesh, "node-a") as js_a, jetstream(mesh, "node-b") as js_b:
        a = NodeAdverts("node-a", mesh, lambda: ["payer"], lambda: 2)
        b = NodeAdverts("node-b", mesh, list, lambda: hosting["node-b"])
        await a.attach(js_a)
        await b.attach(js_b)
        assert a.ttl == pytest.approx(3 * INTERVAL)
        runners = [asyncio.create_task(x.run()) for x in (a, b)]
        try:
            live = await until(lambda: _both(b), 10, "both adverts")
            assert live["node-a"].hosts == ["payer"] and live["node-a"].free_slots == 3
            assert live["node-b"].hosts == []
            assert live["node-b"].free_slots == 5
            assert set(await a.live(["node-b", "node-z", "not a name!"])) == {"node-b"}
            # a record naming another node, junk, or out of bounds: skipped whole
            lies = {
                "node-x": msgspec.json.encode(Advert("node-a", [], 1, 0.0)),
                "node-y": b"{not json",
                "node-w": msgspec.json.encode(Advert("node-w", [], 10**9, 0.0)),
                "node-v": msgspec.json.encode(Advert("node-v", ["x" * 1001], 1, 0.0)),
            }
            for node, value in lies.items():
                await js_b.publish(
                    kv_subject(bucket_name("default", Bucket.NODES), token(node)), value
                )
            assert set(await a.live()) == {"node-a", "node-b"}
        finally:
            runners[1].cancel()  # node-b stops advertising: its advert expires
        stopped = time.monotonic()
        await until(_without(a, "node-b"), 10, "node-b's advert gone")
        gone_after = time.monotonic() - stopped
        assert gone_after <= 3 * INTERVAL + 1.5, gone_after
        assert "node-a" in await a.live()  # still put
        runners[0].cancel()
        await a.withdraw()
        assert "node-a" not in await b.live()


async def _both(adverts: NodeAdverts) -> dict[str, Advert] | None:
    live = await adverts.live()
    return live if {"node-a", "node-b"} <= set(live) else None


def _without(adverts: NodeAdverts, node: str):
    async def check() -> bool:
        return node not in await adverts.live()

    return check


async def test_a_component_goes_round_by_its_checksum(one_server, tmp_path):
    mesh = mesh_section(one_server.urls)
    data = bytes(range(256)) * 2000 + b"tail"  # 512 KiB and a bit: several chunks
    sha = hashlib.sha256(data).hexdigest()
    source = tmp_path / "agent.wasm"
    source.write_bytes(data)
    async with jetstream(mesh, "node-a") as js_a, jetstream(mesh, "node-b") as js_b:
        a, b = ComponentStore(mesh, 1 << 20), ComponentStore(mesh, 1 << 20)
        await a.attach(js_a)
        await b.attach(js_b)
        assert await b.has(sha) is False
        with pytest.raises(ComponentMissing):
            await b.fetch(sha, tmp_path / "missing.wasm")
        assert await a.put(source, sha) is True
        assert await a.put(data, sha) is False  # idempotent: nothing published again
        assert await b.has(sha) is True
        fetched = await b.fetch(sha, tmp_path / "b" / "agent.wasm")
        assert fetched.read_bytes() == data
        assert not list((tmp_path / "b").glob(".*part"))
        empty = hashlib.sha256(b"").hexdigest()
        assert await a.put(b"", empty) is True
        assert (await b.fetch(empty, tmp_path / "b" / "empty.wasm")).read_bytes() == b""


async def test_a_wrong_checksum_or_an_oversized_component_is_refused(one_server, tmp_path):
    mesh = mesh_section(one_server.urls)
    data = b"\0asm" + b"x" * 300_000
    sha = hashlib.sha256(data).hexdigest()
    dest = tmp_path / "out" / "agent.wasm"
    dest.parent.mkdir()
    dest.write_bytes(b"the previous file")
    async with jetstream(mesh, "node-a") as js_a, jetstream(mesh, "node-x") as js_x:
        small = ComponentStore(mesh, 100_000)
        store = ComponentStore(mesh, 1 << 20)
        await small.attach(js_a)
        await store.attach(js_a)
        with pytest.raises(ComponentRefused, match="not the component"):
            await store.put(data + b"!", sha)  # bytes that are not the checksum given
        with pytest.raises(ComponentRefused, match="over 100000"):
            await small.put(data, sha)
        with pytest.raises(ValueError):
            await store.fetch("../../etc/passwd", dest)

        # another member's objects: chunks that are not the checksum's, a meta that lies
        # about the size, a meta naming another digest
        bucket = bucket_name("default", Bucket.COMPONENTS)
        forged = 0

        async def forge(name: str, chunks: list[bytes], size: int, digest: str) -> None:
            nonlocal forged
            forged += 1
            nuid = f"forged{forged}"
            for chunk in chunks:
                await js_x.publish(f"$O.{bucket}.C.{nuid}", chunk)
            largest = max(map(len, chunks), default=CHUNK_BYTES)  # a chunk count that fits
            meta = ObjectRecord(
                name, bucket, nuid, size, len(chunks), digest, options=ObjectOptions(largest)
            )
            await js_x.publish(store._meta_subject(name), msgspec.json.encode(meta))

        evil = b"\0asm" + b"y" * 300_000
        other = hashlib.sha256(evil).hexdigest()
        await forge(sha, [evil[:200_000], evil[200_000:]], len(evil), digest_of(sha))
        with pytest.raises(ComponentRefused, match="is not it"):  # nothing sound to fall back on
            await store.fetch(sha, dest)
        assert await store.put(data, sha) is True
        with pytest.raises(ComponentRefused, match="over the bound"):
            await small.fetch(sha, dest)  # the meta announces more than this node takes

        # forged metas over a sound one hide nothing: a fetch goes back to the sound one
        await forge(sha, [evil[:200_000], evil[200_000:]], len(evil), digest_of(sha))
        await forge(sha, [evil[:10_000], evil[10_000:40_000]], 20_000, digest_of(sha))  # more
        await forge(sha, [evil], len(evil), digest_of(other))
        assert (await store.fetch(sha, dest)).read_bytes() == data
        assert await store.has(sha) is False  # the latest meta is not sound: a put heals it
        assert await store.put(data, sha) is True
        assert await store.has(sha) is True
        assert await store.put(data, sha) is False  # healed: nothing published again

        # past MAX_METAS_TRIED forged metas, the fetch gives up naming the newest's fault,
        # until the next sound put
        for _ in range(MAX_METAS_TRIED):
            await forge(sha, [evil], len(evil), digest_of(other))
        with pytest.raises(ComponentRefused, match="names another"):
            await store.fetch(sha, dest)
        assert dest.read_bytes() == data  # left as the last sound fetch wrote it
        assert not list(dest.parent.glob(".*part"))
        assert await store.put(data, sha) is True
        assert (await store.fetch(sha, dest)).read_bytes() == data
