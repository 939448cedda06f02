"""A client that stops reading is cut at its queue's bound and resumes; shutdown ends streams."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import time

import pytest

from eventstore.store import NewEvent
from node.context import CONTEXT
from node.streams.bus import BUS
from tests.polling import until
from tests.support import ADMIN_TOKEN, NodeProcess, SseStream, auth, make_config, write_config

QUEUE_MAX = 20


@pytest.fixture
def config(tmp_path):
    config = make_config(tmp_path)
    config.node.sse_keepalive_secs = 0.5
    config.node.sse_queue_max = QUEUE_MAX
    return config


def stalled_client(port: int, path: str = "/api/v1/events") -> socket.socket:
    """Sends the request, then never reads: its receive window fills and stays full."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(
        f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\n\r\n".encode()
    )
    return sock


def drain(sock: socket.socket, limit: float = 5.0) -> bytes:
    """Everything the server managed to send before it cut the connection."""
    sock.settimeout(limit)
    chunks = []
    try:
        while chunk := sock.recv(1 << 16):
            chunks.append(chunk)
    except (ConnectionResetError, TimeoutError):
        pass
    return b"".join(chunks)


async def test_a_client_that_stops_reading_is_cut_and_resumes(client):
    ctx = client.app[CONTEXT]
    bus = client.app[BUS]
    sock = stalled_client(client.port)
    await until(lambda: bus.count("events") == 1)
    (slow,) = list(bus._subs["events"])
    async with SseStream(str(client.make_url("/")), "/api/v1/events") as fast:
        blob = "x" * 32_768
        positions = []
        deepest = 0
        for _batch in range(60):  # ~20 MB: far more than the socket buffers hold
            envelopes = await ctx.store.append_many(
                [NewEvent("payer", "log", {"level": "info", "message": blob}) for _ in range(10)]
            )
            positions += [e.position for e in envelopes]
            deepest = max(deepest, slow.pending)
            while int((await fast.next()).id) != positions[-1]:
                pass  # the fast reader keeps up; the stalled one cannot
        assert slow.closed and slow.reason == "overflow"
        assert deepest <= QUEUE_MAX and slow.pending == 0  # memory bounded, then freed
        assert bus.cuts == 1 and bus.count("events") == 1  # only the fast client remains
    received = await asyncio.to_thread(drain, sock)
    sock.close()
    ids = [int(i) for i in re.findall(rb"^id: (\d+)\n", received, re.M)]
    # frames end with a blank line: only the last complete one counts for resumption
    complete = [i for i in ids if re.search(rb"id: %d\n[^\n]*\n[^\n]*\n\n" % i, received)]
    last = complete[-1] if complete else 0
    assert last < positions[-1]
    async with SseStream(
        str(client.make_url("/")), "/api/v1/events", **{"Last-Event-ID": str(last)}
    ) as resumed:
        rest = [int((await resumed.next()).id) for _ in range(positions[-1] - last)]
    assert rest == [p for p in positions if p > last]


async def test_new_streams_are_refused_while_shutting_down(client):
    client.app[CONTEXT].shutting_down = True
    response = await client.get("/api/v1/events", headers=auth())
    assert response.status == 503


def test_sigterm_closes_every_stream_and_exits_zero(tmp_path):
    path = write_config(tmp_path)
    path.write_text(
        path.read_text().replace(
            "shutdown_drain_secs = 0.3", "shutdown_drain_secs = 0.2\nsse_keepalive_secs = 0.5"
        )
    )

    async def scenario(node: NodeProcess) -> float:
        streams = [
            SseStream(node.url, p)
            for p in ("/api/v1/events", "/api/v1/a2a/events", "/api/v1/agui/events")
        ]
        for stream in streams:
            await stream.__aenter__()
        stalled = stalled_client(int(node.url.rsplit(":", 1)[1]))
        await asyncio.sleep(0.3)
        started = time.monotonic()
        node.proc.send_signal(signal.SIGTERM)
        for stream in streams:
            with pytest.raises(EOFError):
                while True:
                    await stream.next(10)
            await stream.close()
        code = await asyncio.to_thread(node.proc.wait, 15)
        stalled.close()
        assert code == 0, node.log_path.read_text()
        return time.monotonic() - started

    with NodeProcess(path) as node:
        elapsed = asyncio.run(scenario(node))
    assert elapsed < 5, elapsed
