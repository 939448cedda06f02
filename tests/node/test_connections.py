"""Hostile connections against a real node with a lowered fd limit (node/web/connections.py):
slow and silent clients are closed within the header deadline and never starve the health
check; a client past its address's cap gets a 503; a client that never reads is dropped."""

from __future__ import annotations

import asyncio
import json
import resource
import socket
import time
from pathlib import Path

import httpx
import pytest

from node.web.connections import (
    ConnectionLimits,
    ConnectionTable,
    client_key,
    connection_cap,
)
from tests.polling import until, wait_until
from tests.support import (
    ADMIN_TOKEN,
    OPERATE_TOKEN,
    READ_TOKEN,
    NodeProcess,
    auth,
    logs_on_failure,
    write_config,
)

FD_LIMIT = 256
HEADER_TIMEOUT = 1.0
ROUNDS = 3
FLOOD = "127.0.0.2"  # the attacker's address; the operator's is 127.0.0.1


def test_the_connection_cap_leaves_room_below_the_fd_limit():
    assert connection_cap(0, 256) == 192  # a quarter kept, at least 64
    assert connection_cap(0, 200) == 136
    assert connection_cap(0, 20_000) == 15_000
    assert connection_cap(100, 256) == 100
    assert connection_cap(5000, 256) == 192  # never past the fd limit's room


def test_ipv6_clients_are_counted_by_their_network():
    assert client_key("2001:db8:1:2:aaaa::1", 64) == "2001:db8:1:2::/64"
    assert client_key("2001:db8:1:2:ffff:ffff:ffff:ffff", 64) == "2001:db8:1:2::/64"
    assert client_key("2001:db8:1:3::1", 64) == "2001:db8:1:3::/64"
    assert client_key("2001:db8:1:3::1", 48) == "2001:db8:1::/48"
    assert client_key("2001:db8:1:3::1", 128) == "2001:db8:1:3::1"
    assert client_key("fe80::1%eth0", 64) == "fe80::/64"
    assert client_key("::ffff:192.0.2.7", 64) == "192.0.2.7"  # IPv4 behind a v6 socket
    assert client_key("192.0.2.7", 64) == "192.0.2.7"


class Connection:
    """What the table needs of a handler: a close, and its slot given back."""

    reserved = False

    def __init__(self, table: ConnectionTable, client: str) -> None:
        self.table, self.client = table, client

    def drop(self) -> None:
        pass

    def release(self) -> None:
        self.table.release(self, self.client)  # type: ignore[arg-type]

    def age(self) -> float:
        return 0.0


def test_one_ipv6_host_cannot_take_more_than_its_networks_share():
    limits = ConnectionLimits(
        header_timeout=1, write_timeout=1, max_total=100, max_per_client=3, ipv6_prefix=64
    )
    table = ConnectionTable(limits)
    # a host rotating through the addresses of its /64
    clients = [client_key(f"2001:db8::{i:x}", 64) for i in range(1, 6)]
    admitted = [table.admit(Connection(table, c), c) for c in clients]  # type: ignore[arg-type]
    assert admitted == [True] * 5  # the oldest silent ones made room
    assert table.per_client == {"2001:db8::/64": 3}
    assert table.counts["evicted_silent"] == 2


def limited_node(tmp_path: Path, extra: str = "") -> NodeProcess:
    keys = f"header_timeout_secs = {HEADER_TIMEOUT}\n" + extra
    if "keepalive_timeout_secs" not in extra:
        keys += "keepalive_timeout_secs = 2.0\n"
    path = write_config(tmp_path, node=keys)
    node = NodeProcess(path)
    node.preexec_fn = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))
    return node


def open_fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def settled_fds(pid: int) -> int:
    """The node's fd count once a connection a client just closed is gone: the least of five
    samples 0.1 s apart."""
    samples = []
    for _ in range(5):
        samples.append(open_fds(pid))
        time.sleep(0.1)
    return min(samples)


def rss_anon_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise AssertionError("no RssAnon")


async def health_ok(url: str) -> float:
    """One health check on a new connection from 127.0.0.1; its latency in seconds."""
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=5) as client:
        response = await client.get(url + "/api/v1/health")
    assert response.status_code == 200, response.text
    return time.monotonic() - started


async def slow_client(host: str, port: int, trickle: bool) -> tuple[float, bytes]:
    """Connect from FLOOD; send nothing, or a header line every 0.3 s; return how long the
    node kept the connection open and what it sent."""
    reader, writer = await asyncio.open_connection(host, port, local_addr=(FLOOD, 0))
    started = time.monotonic()
    received = b""
    try:
        if trickle:
            writer.write(b"GET /api/v1/health HTTP/1.1\r\n")
        while time.monotonic() - started < 10:
            try:
                chunk = await asyncio.wait_for(reader.read(4096), 0.3)
            except TimeoutError:
                if trickle:
                    writer.write(b"X-Slow: 1\r\n")
                continue
            if not chunk:
                break
            received += chunk
    except ConnectionError:
        pass
    finally:
        writer.close()
    return time.monotonic() - started, received


async def test_slow_and_silent_connections_are_closed_and_health_answers_through_a_flood(
    tmp_path,
):
    node = limited_node(tmp_path)
    with logs_on_failure(node.log_path), node:
        host, port = node.config.node.listen.split(":")
        # more slow clients than the node has room for (a quarter of 256 fds stays free)
        flood = [
            asyncio.create_task(slow_client(host, int(port), trickle=i % 2 == 0))
            for i in range(FD_LIMIT + 40)
        ]
        await asyncio.sleep(0.3)
        latencies = [await health_ok(node.url) for _ in range(10)]
        held = await asyncio.gather(*flood)
        assert max(latencies) < 2.0, latencies
        # every slow connection was closed by the node within the header deadline (or earlier,
        # when a newer connection took its place); none got a response
        longest = max(seconds for seconds, _ in held)
        assert longest < HEADER_TIMEOUT + 1.5, longest
        assert all(not received or received.startswith(b"HTTP/1.1 503") for _, received in held)
        wait_until(lambda: open_fds(node.pid) < FD_LIMIT // 2, timeout=5)
        assert httpx.get(node.url + "/api/v1/health", timeout=5).status_code == 200


async def test_a_client_over_its_address_cap_gets_503_and_others_are_served(tmp_path):
    node = limited_node(tmp_path, "max_connections_per_client = 5\n")
    with logs_on_failure(node.log_path), node:
        host, port = node.config.node.listen.split(":")
        # five open event streams: busy, not evictable
        held = [await stream(host, int(port), FLOOD) for _ in range(5)]
        reader, writer = await asyncio.open_connection(host, int(port), local_addr=(FLOOD, 0))
        refused = await asyncio.wait_for(reader.read(), 5)
        head, _, body = refused.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503")
        assert b"application/problem+json" in head
        assert json.loads(body)["status"] == 503
        writer.close()
        await health_ok(node.url)  # another address is served
        for _, w in held:
            w.close()


async def stream(
    host: str, port: int, address: str, token: str = READ_TOKEN
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """An open GET /api/v1/events from `address`, its headers read: a busy connection."""
    reader, writer = await asyncio.open_connection(host, port, local_addr=(address, 0))
    writer.write(
        f"GET /api/v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n".encode()
    )
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 200"), head
    return reader, writer


async def test_a_full_address_lets_its_oldest_silent_connection_go_not_anothers(tmp_path):
    node = limited_node(tmp_path, "max_connections_per_client = 3\n")
    with logs_on_failure(node.log_path), node:
        host, port = node.config.node.listen.split(":")

        writers = []  # kept: a writer collected closes its connection

        async def silent(address: str) -> asyncio.StreamReader:
            reader, writer = await asyncio.open_connection(host, int(port), local_addr=(address, 0))
            writers.append(writer)
            await asyncio.sleep(0.05)  # accepted in this order
            return reader

        other = await silent("127.0.0.3")
        oldest, *rest = [await silent(FLOOD) for _ in range(3)]
        newest = await silent(FLOOD)
        assert await asyncio.wait_for(oldest.read(), HEADER_TIMEOUT / 2) == b""  # let go at once
        for reader in (other, *rest, newest):
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(reader.read(), 0.1)  # still open


async def test_a_body_slower_than_its_deadline_gets_408(tmp_path):
    node = limited_node(tmp_path, "body_timeout_secs = 1.0\n")
    with logs_on_failure(node.log_path), node:
        host, port = node.config.node.listen.split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            b"POST /api/v1/findings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {OPERATE_TOKEN}\r\nContent-Length: 100\r\n\r\n".encode()
            + b'{"agent": '
        )
        started = time.monotonic()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 408") and b"application/problem+json" in head
        assert 0.9 < time.monotonic() - started < 3
        writer.close()


def never_reader(host: str, port: int, path: str) -> socket.socket:
    """A client that asks for a large response and never reads it."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, port))
    request = f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {READ_TOKEN}\r\n\r\n"
    sock.sendall(request.encode())
    return sock


def read_to_end(sock: socket.socket) -> int:
    """The bytes a client gets once it reads at last, until the end or a reset."""
    sock.settimeout(5)
    total = 0
    try:
        while chunk := sock.recv(1 << 20):
            total += len(chunk)
    except ConnectionResetError:
        pass
    finally:
        sock.close()
    return total


@pytest.mark.timeout(60)
def test_clients_that_never_read_are_dropped_and_their_buffers_freed(tmp_path):
    keys = "write_timeout_secs = 1.0\npage_max_kb = 16384\nrequests_per_token = 4\n"
    node = limited_node(tmp_path, keys)
    with logs_on_failure(node.log_path), node:
        with httpx.Client(base_url=node.url, headers=auth(OPERATE_TOKEN), timeout=30) as client:
            for i in range(100):  # 6 MB of findings
                body = {
                    "agent": "node-a",
                    "severity": "low",
                    "title": f"f{i}",
                    "detail": "x" * 60_000,
                }
                assert client.post("/api/v1/findings", json=body).status_code == 201
        host, port = node.config.node.listen.split(":")
        path = "/api/v1/findings?limit=1000"
        fds_before = settled_fds(node.pid)
        rss_before = rss_anon_kb(node.pid)

        def reader_status() -> int:
            return httpx.get(node.url + "/api/v1/status", headers=auth(READ_TOKEN)).status_code

        rounds = []
        for _ in range(ROUNDS):
            started = time.monotonic()
            socks = [never_reader(host, int(port), path) for _ in range(8)]
            wait_until(lambda: open_fds(node.pid) >= fds_before + 8, timeout=5, interval=0.01)
            if not rounds:  # unread answers count as the reader's requests in flight until
                # dropped (node/web/inflight.py): past four, the reader is refused meanwhile
                wait_until(lambda: reader_status() == 429, timeout=2, interval=0.01)
            wait_until(lambda: open_fds(node.pid) <= fds_before, timeout=10)
            rounds.append((time.monotonic() - started, rss_anon_kb(node.pid)))
            # each response was cut short: the node dropped the connection, it did not finish
            assert all(read_to_end(sock) < 6_000_000 for sock in socks)
        assert reader_status() == 200
        # dropped within the write deadline; had the node kept the unread responses, it would
        # hold ROUNDS x 8 x 6 MB; what it holds after the last round is under two rounds' worth
        assert all(seconds < 1 + 3 for seconds, _ in rounds), rounds
        assert rounds[-1][1] - rss_before < 2 * 8 * 6 * 1024, (rss_before, rounds)
        assert httpx.get(node.url + "/api/v1/health", timeout=5).status_code == 200


# ------------------------------------------------------------------ a node full of clients
CROWD_CAP, CROWD_RESERVED, CROWD_PER_CLIENT = 40, 4, 10
CROWD = [f"127.0.0.{i}" for i in range(2, 6)]  # four addresses, ten connections each: the cap


@pytest.fixture(scope="module")
def crowded_node(tmp_path_factory):
    """One node for the tests below, with room for 40 connections (4 of them reserved)."""
    keys = (
        f"max_connections = {CROWD_CAP}\nreserved_connections = {CROWD_RESERVED}\n"
        f"max_connections_per_client = {CROWD_PER_CLIENT}\nkeepalive_timeout_secs = 60\n"
    )
    node = limited_node(tmp_path_factory.mktemp("crowded"), keys)
    with logs_on_failure(node.log_path), node:
        yield node


async def kept_alive(
    host: str, port: int, address: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A keep-alive connection from `address` that made one request and now idles."""
    reader, writer = await asyncio.open_connection(host, port, local_addr=(address, 0))
    writer.write(b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 200"), head
    await reader.readexactly(int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0]))
    return reader, writer


async def closed_by_node(reader: asyncio.StreamReader, within: float) -> bool:
    try:
        return await asyncio.wait_for(reader.read(), within) == b""
    except TimeoutError:
        return False
    except ConnectionError:
        return True


def connection_closes(node: NodeProcess) -> dict[str, float]:
    """svc_http_connections_closed_total by reason, from the node's metrics."""
    text = httpx.get(node.url + "/api/v1/metrics", headers=auth(ADMIN_TOKEN), timeout=5).text
    prefix = 'svc_http_connections_closed_total{reason="'
    return {
        line[len(prefix) :].split('"')[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(prefix)
    }


async def drained(node: NodeProcess, before: int) -> None:
    """The node holds no more fds than `before` (the loop runs meanwhile: closes go out)."""
    await until(lambda: open_fds(node.pid) <= before, timeout=10, what="the node's fds drained")


async def test_idle_keepalive_connections_from_several_addresses_give_way_oldest_first(
    crowded_node,
):
    node = crowded_node
    host, port = node.config.node.listen.split(":")
    fds = settled_fds(node.pid)
    evicted_before = connection_closes(node)["evicted_idle"]
    # the attack, scaled: every slot held by an idle keep-alive connection, from
    # addresses under their own cap
    held = [await kept_alive(host, int(port), address) for address in CROWD for _ in range(10)]
    idle = [reader for reader, _ in held]
    # the last four took the places of the four oldest (the cap keeps 4 for operators)
    assert all(await asyncio.gather(*(closed_by_node(r, 1) for r in idle[:CROWD_RESERVED])))
    # a client from elsewhere gets in: the oldest idle one gives way (once: the client's
    # connection is gone after its answer, and the next one takes its place)
    for _ in range(5):
        await health_ok(node.url)
    closed = await asyncio.gather(*(closed_by_node(r, 0.3) for r in idle))
    assert closed == [True] * (CROWD_RESERVED + 1) + [False] * (len(idle) - CROWD_RESERVED - 1)
    assert connection_closes(node)["evicted_idle"] - evicted_before == CROWD_RESERVED + 1
    for _, writer in held:
        writer.close()
    await drained(node, fds)


async def test_when_every_slot_is_busy_reserved_ones_serve_health_and_admins_only(
    crowded_node,
):
    node = crowded_node
    host, port = node.config.node.listen.split(":")
    fds = settled_fds(node.pid)
    refused_before = connection_closes(node)["reserved_refused"]
    busy = [
        await stream(host, int(port), address)
        for address in CROWD
        for _ in range((CROWD_CAP - CROWD_RESERVED) // len(CROWD))
    ]
    # the node is full of streams: a reader's next one lands on a reserved slot and is refused
    reader, writer = await asyncio.open_connection(host, int(port), local_addr=(CROWD[0], 0))
    writer.write(
        f"GET /api/v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {READ_TOKEN}\r\n\r\n"
        .encode()
    )  # fmt: skip
    refused = await asyncio.wait_for(reader.read(), 5)  # and closed
    assert refused.startswith(b"HTTP/1.1 503") and b"Retry-After: 1" in refused
    # the health check and an admin get in
    for _ in range(3):
        await health_ok(node.url)
    async with httpx.AsyncClient(timeout=5) as client:
        answer = await client.get(node.url + "/api/v1/status", headers=auth(ADMIN_TOKEN))
        assert answer.status_code == 200, answer.text
    assert connection_closes(node)["reserved_refused"] - refused_before == 1
    for _, w in busy:
        w.close()
    await drained(node, fds)
