"""NodeAdverts and ComponentStore against a real nats-server: adverts are put, read back,
checked, and expire; components go round by checksum, anything else is refused, a member's
forged metas hide nothing, and a slow store holds no caller past its deadline."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import AsyncIterator

import msgspec
import pytest

from node.config.load import parse_config
from node.placement.adverts import Advert, NodeAdverts, served_domains
from node.placement.components import (
    CHUNK_BYTES,
    MAX_METAS_TRIED,
    MIN_CHUNK_BYTES,
    MIN_RATE,
    ComponentError,
    ComponentMissing,
    ComponentRefused,
    ComponentStore,
    ObjectOptions,
    ObjectRecord,
    digest_of,
)
from node.sync.nats.subjects import Bucket, bucket_name, kv_subject, token
from tests.nats_support import NatsCluster
from tests.placement.support import jetstream, mesh_section
from tests.polling import until

pytestmark = pytest.mark.timeout(120)
INTERVAL = 0.3


@pytest.fixture(scope="module")
def one_server(tmp_path_factory):
    servers = NatsCluster(tmp_path_factory.mktemp("nats"), 1).start()
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


async def _forge_meta(js, store: ComponentStore, sha: str, chunks: list[bytes], **meta) -> None:
    """A member's object for `sha`: its chunks on a subject of its own, then a meta naming them
    (the right name, digest and size unless `meta` says otherwise)."""
    nuid = f"m{time.monotonic_ns()}"
    for chunk in chunks:
        await js.publish(f"$O.{store.bucket}.C.{nuid}", chunk)
    fields = {"size": sum(map(len, chunks)), "chunks": len(chunks), "digest": digest_of(sha)}
    record = ObjectRecord(sha, store.bucket, nuid, **{**fields, **meta})  # type: ignore[arg-type]
    await js.publish(store._meta_subject(sha), msgspec.json.encode(record))


def _pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


async def test_a_meta_with_more_chunks_than_its_size_justifies_is_refused_unread(
    one_server, tmp_path
):
    """The chunks are the component's bytes, cut a thousand bytes each: read, they would pass;
    the count alone refuses them, and a fetch goes back to the sound meta under them."""
    mesh = mesh_section(one_server.urls)
    data = b"\0asm" + b"c" * 300_000
    sha = hashlib.sha256(data).hexdigest()
    lone = b"\0asm" + b"d" * 300_000  # with no sound meta to fall back on
    lone_sha = hashlib.sha256(lone).hexdigest()
    dest = tmp_path / "agent.wasm"
    async with jetstream(mesh, "node-a") as js_a, jetstream(mesh, "node-x") as js_x:
        store = ComponentStore(mesh, 1 << 20)
        await store.attach(js_a)
        assert await store.put(data, sha) is True
        most = -(-len(data) // MIN_CHUNK_BYTES)
        assert len(_pieces(data, 1000)) > most
        await _forge_meta(js_x, store, sha, _pieces(data, 1000))
        assert await store.has(sha) is False
        assert (await store.fetch(sha, dest)).read_bytes() == data
        assert await store.put(data, sha) is True  # healed
        assert await store.has(sha) is True

        await _forge_meta(js_x, store, lone_sha, _pieces(lone, 1000))
        with pytest.raises(ComponentRefused, match=f"claims 301 chunks for {len(lone)} bytes"):
            await store.fetch(lone_sha, dest)
        # too few for the chunk size the meta announces, or an absurd chunk size
        await _forge_meta(js_x, store, lone_sha, [lone])
        with pytest.raises(ComponentRefused, match="claims 1 chunks"):
            await store.fetch(lone_sha, dest)
        await _forge_meta(js_x, store, lone_sha, [lone], options=ObjectOptions(1 << 30))
        with pytest.raises(ComponentRefused, match="chunks of up to"):
            await store.fetch(lone_sha, dest)
        # five chunks fit 300 KiB of at most 64 KiB each, but the first is larger: refused
        # as it is read
        uneven = [lone[:150_000], *_pieces(lone[150_000:], 37_501)]
        await _forge_meta(js_x, store, lone_sha, uneven, options=ObjectOptions(1 << 16))
        with pytest.raises(ComponentRefused, match="exceed what its meta announced"):
            await store.fetch(lone_sha, dest)
        assert dest.read_bytes() == data


@contextlib.asynccontextmanager
async def _slow_link(url: str, delay: float) -> AsyncIterator[str]:
    """A TCP relay to the nats-server at `url` that holds each read from the server `delay`
    seconds: a server (or link) that answers every call, slowly. Yields the relay's URL."""
    host, port = url.removeprefix("nats://").rsplit(":", 1)

    async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hold: float):
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                await asyncio.sleep(hold)
                writer.write(data)
                await writer.drain()
        writer.close()

    relays: set[asyncio.Future] = set()

    async def relay(client_reader, client_writer) -> None:
        server_reader, server_writer = await asyncio.open_connection(host, int(port))
        pumps = asyncio.gather(
            pump(client_reader, server_writer, 0.0), pump(server_reader, client_writer, delay)
        )
        relays.add(pumps)
        with contextlib.suppress(asyncio.CancelledError):
            await pumps

    server = await asyncio.start_server(relay, "127.0.0.1", 0)
    try:
        yield f"nats://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        for pumps in relays:
            pumps.cancel()
        await asyncio.gather(*relays, return_exceptions=True)


async def test_a_slow_store_holds_no_call_past_its_deadline(one_server, tmp_path):
    """A sound object whose latest meta names 16 chunks of 16 KiB (a count that fits), read
    through a link that answers each call in DELAY (well within call_timeout): the whole read
    would take 17 round trips; has, put and fetch each give up at their deadline with a
    ComponentError, not a refusal (fetch does not fall back, put does not upload again)."""
    call_timeout, delay = 0.2, 0.08
    data = b"\0asm" + b"s" * (16 * MIN_CHUNK_BYTES - 4)
    sha = hashlib.sha256(data).hexdigest()
    dest = tmp_path / "agent.wasm"
    dest.write_bytes(b"the previous file")
    deadline = 2 * call_timeout + len(data) / MIN_RATE
    assert 17 * delay > deadline + 0.5  # the read would outlast it by far
    mesh = mesh_section(one_server.urls)
    async with jetstream(mesh, "node-a") as js_a, _slow_link(one_server.urls[0], delay) as url:
        fast = ComponentStore(mesh, 1 << 20)
        await fast.attach(js_a)
        assert await fast.put(data, sha) is True
        await _forge_meta(js_a, fast, sha, _pieces(data, MIN_CHUNK_BYTES))
        assert await fast.has(sha) is True  # its chunks are the bytes: sound
        async with jetstream(mesh_section([url]), "node-b") as js_b:
            slow = ComponentStore(mesh, 1 << 20, call_timeout=call_timeout)
            await slow.attach(js_b)
            calls = {
                "has": lambda: slow.has(sha),
                "put": lambda: slow.put(data, sha),
                "fetch": lambda: slow.fetch(sha, dest),
            }
            for name, call in calls.items():
                started = time.monotonic()
                with pytest.raises(ComponentError) as raised:
                    await call()
                took = time.monotonic() - started
                assert type(raised.value) is ComponentError, (name, raised.value)
                assert took < deadline + 0.4, (name, took)
    assert dest.read_bytes() == b"the previous file"
    assert not list(tmp_path.glob(".*part"))
