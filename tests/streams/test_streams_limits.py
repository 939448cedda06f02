"""Caps on open streams and replays, per token and in total: past them a 429 problem+json with
Retry-After before any stream opens, and a slot frees when its client leaves."""

from __future__ import annotations

import asyncio
import socket

import pytest

from eventstore.store import NewEvent
from node.config.reload import Reloader
from node.context import CONTEXT
from node.streams.bus import BUS
from node.streams.slots import RETRY_AFTER_SECS, STREAM_SLOTS
from node.web.http import PROBLEM_TYPE
from tests.polling import until
from tests.support import ADMIN_TOKEN, READ_TOKEN, SseStream, auth, make_config

WATCH_TOKEN = "test-watch-token-000000001"


@pytest.fixture
def config(tmp_path):
    watcher = f'[[auth.tokens]]\nname = "watcher"\ntoken = "{WATCH_TOKEN}"\nscopes = ["read"]\n'
    config = make_config(tmp_path, watcher)
    config.node.sse_keepalive_secs = 0.2  # a client that left is noticed at the next ping
    config.node.sse_streams_per_token = 2
    config.node.sse_streams_max = 3
    config.node.sse_replays_per_token = 1
    config.node.sse_replays_max = 2
    return config


def url(client) -> str:
    return str(client.make_url("/"))


async def refused(client, path: str, token: str, cap: str, **headers: str) -> None:
    response = await client.get(path, headers={**auth(token), **headers})
    assert response.status == 429
    assert response.headers["Content-Type"].startswith(PROBLEM_TYPE)
    assert response.headers["Retry-After"] == str(RETRY_AFTER_SECS)
    body = await response.json()
    assert body["status"] == 429 and f"node.{cap}" in body["detail"], body


async def test_streams_are_capped_per_token_and_in_all_and_a_leaving_client_frees_its_slot(
    client,
):
    base, slots = url(client), client.app[STREAM_SLOTS]
    await client.app[CONTEXT].store.append("payer", "log", {"level": "info", "message": "hi"})
    first = await SseStream(base, "/api/v1/events", READ_TOKEN).__aenter__()
    async with SseStream(base, "/api/v1/a2a/events", READ_TOKEN) as second:
        assert first.response.status_code == second.response.status_code == 200
        # the reader holds its two: every stream endpoint refuses it a third
        for path in ("/api/v1/events", "/api/v1/agui/events", "/api/v1/agents/stream?agent=payer"):
            await refused(client, path, READ_TOKEN, "sse_streams_per_token")
        async with SseStream(base, "/api/v1/agui/events", ADMIN_TOKEN) as third:
            assert third.response.status_code == 200
            # three open in all: another token is refused too
            await refused(client, "/api/v1/events", WATCH_TOKEN, "sse_streams_max")
            assert slots.open_count == 3
        await first.close()  # the client leaves: its slot frees once the node notices
        await until(lambda: slots.open_count == 1, 5, "the slots of the clients that left")
        async with SseStream(base, "/api/v1/events", READ_TOKEN) as again:
            assert again.response.status_code == 200
            assert (await again.next(5, skip_keepalive=False)).event == "keepalive"
    await until(lambda: slots.open_count == 0, 5, "every slot freed")


class StalledReplay:
    """A client that resumes from 0 and never reads: its replay stays under way, stuck on a
    full socket, holding its replay slot."""

    def __init__(self, port: int, token: str) -> None:
        self.port, self.token = port, token
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> StalledReplay:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", self.port))
        reader, self.writer = await asyncio.open_connection(sock=sock)
        self.writer.write(
            f"GET /api/v1/events HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {self.token}\r\n"
            "Last-Event-ID: 0\r\n\r\n".encode()
        )
        head = await reader.readuntil(b"\r\n\r\n")
        assert b" 200 " in head.split(b"\r\n", 1)[0], head
        return self

    def close(self) -> None:
        assert self.writer is not None
        self.writer.transport.abort()


async def test_replays_are_capped_per_token_and_in_all_and_end_their_hold(client):
    ctx, slots = client.app[CONTEXT], client.app[STREAM_SLOTS]
    pad = "r" * 32_000  # 400 events of 32 KB: far more than socket buffers hold
    await ctx.store.append_many(
        [NewEvent("payer", "log", {"level": "info", "message": f"{i}{pad}"}) for i in range(400)]
    )
    port = client.server.port
    stalled = await StalledReplay(port, READ_TOKEN).open()
    await until(lambda: slots.replay_count == 1, 5, "the replay under way")
    resume = {"Last-Event-ID": "0"}
    await refused(client, "/api/v1/events", READ_TOKEN, "sse_replays_per_token", **resume)
    assert slots.open_count == 1  # the refused stream's slot was given back
    # a stream that replays nothing is not a replay; one resuming at the head replays nothing
    async with SseStream(url(client), "/api/v1/a2a/events", READ_TOKEN) as live:
        assert live.response.status_code == 200
    await until(lambda: slots.open_count == 1, 5, "the live stream's slot freed")
    head = {"Last-Event-ID": str(ctx.store.last_position)}
    async with SseStream(url(client), "/api/v1/events", READ_TOKEN, **head) as at_head:
        assert at_head.response.status_code == 200
    await until(lambda: slots.open_count == 1, 5, "that stream's slot freed")
    other = await StalledReplay(port, ADMIN_TOKEN).open()
    await until(lambda: slots.replay_count == 2, 5, "two replays under way")
    await refused(client, "/api/v1/events", WATCH_TOKEN, "sse_replays_max", **resume)
    stalled.close()
    other.close()
    await until(lambda: slots.open_count == slots.replay_count == 0, 10, "slots of the stalled")
    # the reader may replay again, and gets every event once, in order
    async with SseStream(url(client), "/api/v1/events", READ_TOKEN, **resume) as replay:
        ids = [int((await replay.next(10)).id) for _ in range(400)]
    assert ids == list(range(1, 401))


async def test_a_revoked_tokens_replay_stuck_on_a_full_socket_ends_at_the_reload(client, tmp_path):
    ctx, slots = client.app[CONTEXT], client.app[STREAM_SLOTS]
    pad = "v" * 32_000
    await ctx.store.append_many(
        [NewEvent("payer", "log", {"level": "info", "message": f"{i}{pad}"}) for i in range(400)]
    )
    stalled = await StalledReplay(client.server.port, WATCH_TOKEN).open()
    await until(lambda: slots.replay_count == 1, 5, "the replay under way")
    await until(lambda: slots.open_count == 1, 5, "its stream slot")
    path = tmp_path / "runtime.toml"
    path.write_text(
        path.read_text().replace(f'token = "{WATCH_TOKEN}"', 'token = "another-token-0000000001"')
    )
    assert await Reloader(client.app, path, None).reload()  # the token changed: revoked
    assert slots.open_count == slots.replay_count == 0 and slots.revoked == 1
    # the handler, stuck writing to a client that does not read, was cut and has ended
    bus = client.app[BUS]
    await until(lambda: bus.count() == 0, 5, "the revoked stream's handler ended")
    stalled.close()
