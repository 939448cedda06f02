"""The lean pull and raw subscriptions of node/sync/nats/raw.py against a real nats-server."""

from __future__ import annotations

import asyncio
import json

import pytest
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig

from node.sync.nats.raw import Delivered, RawClient, RawPull, hpub_frame
from tests.nats_support import NatsServer
from tests.polling import until

pytestmark = pytest.mark.timeout(60)
STREAM, SUBJECTS = "RAW", "raw.>"


@pytest.fixture
def server(tmp_path):
    started = NatsServer(tmp_path, "raw").start()
    yield started
    started.kill()


async def connected(server: NatsServer) -> RawClient:
    async def connect() -> RawClient | None:
        client = RawClient()
        try:
            await client.connect(server.url, connect_timeout=1, allow_reconnect=False)
        except Exception:
            return None
        return client

    client: RawClient = await until(connect, 20, "nats-server accepts connections", 0.1)
    return client


async def stream_with_consumer(nc: RawClient, ack_wait: float = 30) -> None:
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name=STREAM, subjects=[SUBJECTS]))
    await js.add_consumer(
        STREAM,
        ConsumerConfig(
            durable_name="reader", ack_policy=AckPolicy.ALL, ack_wait=ack_wait, max_deliver=-1
        ),
    )


async def publish(nc: RawClient, first: int, count: int) -> None:
    js = nc.jetstream()
    for n in range(first, first + count):
        await js.publish(f"raw.a{n % 3}", f"message {n}".encode(), headers={"Nats-Msg-Id": str(n)})


async def take_all(pull: RawPull, count: int) -> list[Delivered]:
    got: list[Delivered] = []

    async def more() -> bool:
        await pull.top_up()
        got.extend(await pull.take(0.2))
        return len(got) >= count

    await until(more, 20, f"{count} messages pulled", 0)
    return got


async def test_pull_delivers_bytes_in_order_and_one_ack_takes_the_batch(server):
    nc = await connected(server)
    try:
        await stream_with_consumer(nc)
        await publish(nc, 0, 250)
        pull = RawPull(nc, STREAM, "reader", batch=40)
        await pull.start()
        got = await take_all(pull, 250)
        assert [m.data for m in got] == [f"message {n}".encode() for n in range(250)]
        assert [m.subject for m in got[:3]] == [b"raw.a0", b"raw.a1", b"raw.a2"]
        assert {m.deliveries for m in got} == {1}
        # the consumer's delivery sequence counts up by one (the heads follower's gap check)
        assert [m.consumer_seq for m in got] == list(range(1, 251))
        assert [m.stream_seq for m in got] == list(range(1, 251))
        await pull.ack_through(got[-1])  # ack policy all: one ack for everything delivered
        info = await until(lambda: acked_all(nc), 10, "the consumer sees the ack")
        assert info.num_pending == 0
        await pull.stop()
    finally:
        await nc.close()


async def acked_all(nc: RawClient):
    info = await nc.jetstream().consumer_info(STREAM, "reader")
    return info if info.num_ack_pending == 0 else None


async def test_pull_asks_again_after_its_requests_expire(server):
    """Requests that expired empty (the server's 408) give back their credit: what is
    published afterwards still comes, without a reconnect."""
    nc = await connected(server)
    try:
        await stream_with_consumer(nc)
        pull = RawPull(nc, STREAM, "reader", batch=10, expires=0.3)
        await pull.start()
        await pull.top_up()
        assert await pull.take(1.0) == []  # the request expired meanwhile
        await publish(nc, 0, 5)
        got = await take_all(pull, 5)
        assert [m.data for m in got] == [f"message {n}".encode() for n in range(5)]
        await pull.stop()
    finally:
        await nc.close()


async def test_unacknowledged_messages_come_again_marked_as_redelivered(server):
    nc = await connected(server)
    try:
        await stream_with_consumer(nc, ack_wait=1)
        await publish(nc, 0, 3)
        pull = RawPull(nc, STREAM, "reader", batch=10, expires=0.5)
        await pull.start()
        first = await take_all(pull, 3)
        assert {m.deliveries for m in first} == {1}
        again = await take_all(pull, 3)  # no ack: after ack_wait the server sends them again
        # each message's ack_wait runs out on its own, so they may come back in another order
        assert sorted(m.data for m in again) == [m.data for m in first]
        assert {m.deliveries for m in again} == {2}
        await pull.stop()
    finally:
        await nc.close()


async def test_raw_subscription_leaves_ordinary_ones_alone(server):
    """The same client still serves nats-py's own subscriptions, requests and JetStream."""
    nc = await connected(server)
    try:
        raw: list[tuple[bytes, bytes]] = []
        arrived = asyncio.Event()

        def sink(subject: bytes, reply: bytes, data: bytes, headers: bytes) -> None:
            raw.append((subject, data))
            arrived.set()

        sid = await nc.raw_subscribe("raw.sink", sink)
        ordinary = await nc.subscribe("plain")
        await nc.publish("raw.sink", b"bytes", headers={"X-Any": "1"})
        await nc.publish("plain", b"a Msg")
        await asyncio.wait_for(arrived.wait(), 5)
        assert raw == [(b"raw.sink", b"bytes")]
        message = await ordinary.next_msg(timeout=5)
        assert message.data == b"a Msg"
        await nc.raw_unsubscribe(sid)
        await nc.jetstream().add_stream(StreamConfig(name=STREAM, subjects=[SUBJECTS]))
        ack = await nc.jetstream().publish("raw.x", b"stored")
        assert ack.seq == 1
    finally:
        await nc.close()


def test_a_delivery_count_is_read_from_the_reply_subject_and_bounded():
    ack = b"$JS.ACK.mesh.reader.%s.7.7.1700000000000000000.0"
    assert Delivered(b"s", ack % b"3", b"").deliveries == 3
    newer = b"$JS.ACK.hub.ACCOUNTHASH.mesh.reader.%s.7.7.1700000000000000000.0.token"
    assert Delivered(b"s", newer % b"2", b"").deliveries == 2
    # a server could send anything there: no digits, or more digits than int() accepts
    assert Delivered(b"s", ack % b"x", b"").deliveries == 1
    assert Delivered(b"s", ack % (b"9" * 5000), b"").deliveries == 1

    sequences = b"$JS.ACK.mesh.reader.1.%s.%s.1700000000000000000.0"
    assert Delivered(b"s", sequences % (b"41", b"12"), b"").consumer_seq == 12
    assert Delivered(b"s", sequences % (b"41", b"x"), b"").consumer_seq == 0
    newest = b"$JS.ACK.hub.ACCOUNTHASH.mesh.reader.1.41.%s.1700000000000000000.0.token"
    assert Delivered(b"s", newest % b"13", b"").consumer_seq == 13


async def test_frames_are_published_in_one_write_and_deduplicated_by_message_id(server):
    nc = await connected(server)
    try:
        await nc.jetstream().add_stream(StreamConfig(name=STREAM, subjects=[SUBJECTS]))
        acks: list[tuple[bytes, bytes]] = []
        sid = await nc.raw_subscribe("acks.*", lambda s, r, d, h: acks.append((s, d)))
        bodies = [b"body %d" % n for n in range(6)]
        frames = [  # the last three repeat the first three's message ids
            hpub_frame(b"raw.f", b"acks.%d" % n, b"Nats-Msg-Id: m%d" % (n % 3), body)
            for n, body in enumerate(bodies)
        ]
        await nc.publish_frames(frames, sum(map(len, bodies)))
        await until(lambda: len(acks) == 6, 10, "six acknowledgements", 0.05)
        replies = {s: json.loads(d) for s, d in acks}
        assert [replies[b"acks.%d" % n].get("duplicate", False) for n in range(6)] == [
            False,
            False,
            False,
            True,
            True,
            True,
        ]
        info = await nc.jetstream().stream_info(STREAM)
        assert info.state.messages == 3
        stored = await nc.jetstream().get_msg(STREAM, 2)
        assert stored.data == b"body 1" and stored.headers == {"Nats-Msg-Id": "m1"}
        assert nc.stats["out_msgs"] >= 6
        await nc.raw_unsubscribe(sid)
    finally:
        await nc.close()
