"""Hostile clients against a real node process on loopback: what each attack does to the node's
memory (RssAnon, /proc/PID/status), its file descriptors and /api/v1/health's failures and
latency, next to the same node unloaded, in the same run (node/web/connections.py, issues 34
and 45).

Attacks, one after the other, each for `--secs` while health is probed (a new connection per
probe, from 127.0.0.1, about 50 a second), RssAnon and the node's open fds sampled every 0.2 s
(their peaks reported against the fd limit) and the node's CPU share taken:

1. slow_flood: up to near the node's fd limit (`--fds`, set in the node with setrlimit), or
   `--flood N`, of slow connections from many loopback addresses (127.0.1.x, 200 each): half
   send nothing, half a header line every 2 s; each reconnects when the node closes it.
2. keepalive_fill: `--keepalive-clients` (default: the fd limit) keep-alive connections from
   7 and more addresses (under the per-address cap), each sending GET /api/v1/health every
   `--keepalive-every` s (15) and idling between; each reconnects when the node closes it.
3. slow_bodies: `--slow-bodies` (default: the fd limit) requests whose bodies trickle a byte
   every 5 s, spread over every door: A2A JSON-RPC (read token), MCP (operate), a PATCH of an
   agent (admin), a sync push (admin), a registry upload (publish), a finding (operate), from
   many addresses; each starts again when the node answers or closes it (after the 1 s of
   Retry-After when the answer was a 429 or 503).
4. never_read: `--never-readers` clients that ask for a large answer (a page of 60 KB
   findings, the task list of 800 tasks of 60 KB, A2A ListTasks of those tasks) and never read.
5. sse_replay: ten concurrent GET /api/v1/events with Last-Event-ID: 0 by a read token, over a
   journal of `--journal` events, read as fast as they come.
6. tls_handshake_flood, against the same node serving TLS (a self-signed certificate made here;
   probes over TLS): twice `--fds` plain TCP connections, from many addresses, that send no
   ClientHello or the first bytes of one, each reconnecting when the node closes it.

Bounded: every phase lasts `--secs`, every connection count is fixed. The node runs with its
defaults but for `write_timeout_secs` (`--write-timeout`, so that drops land within a phase).
The last line printed is one JSON object; per phase `health_failed` (must be 0),
`health_p99_ms`, `node_fds_peak` against `fd_limit`, `rss_anon_growth_mb`.

`--base COMMIT` runs every phase again against that commit's node (its defaults; exported with
git archive), after this tree's, under "base".

Usage: .venv/bin/python bench/hostile_load.py [--fds 2048] [--flood N] [--secs 8]
    [--never-readers 64] [--journal 100000] [--write-timeout 3] [--base COMMIT]
    [--keepalive-clients N] [--slow-bodies N] [--phases slow_flood,tls_handshake_flood,...]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import resource
import socket
import ssl
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, export, percentile, report
from bench.streams import prefill
from harness.node import (
    ADMIN_TOKEN,
    OPERATE_TOKEN,
    PUBLISH_TOKEN,
    READ_TOKEN,
    NodeProcess,
    auth,
    tiny_component,
    write_config,
)
from harness.tls import make_ca, make_server_cert, with_tls

PER_ADDRESS = 200  # under the node's default per-client cap (256)
TRICKLE_SECS = 5.0  # a slow body's byte every so often, as in the report


def rss_anon_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_secs(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def addresses(prefix: str, count: int, per_address: int = PER_ADDRESS) -> list[str]:
    """`count` client addresses `prefix`.N, `per_address` connections each."""
    return [f"{prefix}.{1 + i // per_address}" for i in range(count)]


async def probe_health(url: str, secs: float, context: ssl.SSLContext | None) -> dict:
    """GET /api/v1/health on a new connection each time, about 50 a second."""
    latencies: list[float] = []
    failures: dict[str, int] = {}  # why, by status or exception
    connector = aiohttp.TCPConnector(force_close=True, ssl=context or False)
    timeout = aiohttp.ClientTimeout(total=2)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        end = time.monotonic() + secs
        while time.monotonic() < end:
            started = time.perf_counter()
            why = ""
            try:
                async with session.get(url + "/api/v1/health") as response:
                    await response.read()
                    why = "" if response.status == 200 else str(response.status)
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                why = type(exc).__name__
            elapsed = time.perf_counter() - started
            if not why:
                latencies.append(elapsed)
            else:
                failures[why] = failures.get(why, 0) + 1
            await asyncio.sleep(max(0.0, 0.02 - elapsed))

    def ms(seconds: float) -> float | None:  # None (JSON null): no probe was answered
        return round(seconds * 1000, 2) if latencies else None

    return {
        "health_p50_ms": ms(percentile(latencies, 0.5)),
        "health_p99_ms": ms(percentile(latencies, 0.99)),
        "health_max_ms": ms(max(latencies, default=0.0)),
        "health_ok": len(latencies),
        "health_failed": sum(failures.values()),
        "health_failed_by": failures,
    }


async def sample(pid: int, stop: asyncio.Event) -> tuple[float, int]:
    """The peaks of RssAnon (MB) and of open fds, every 0.2 s until `stop`."""
    rss, fds = 0.0, 0
    while not stop.is_set():
        rss, fds = max(rss, rss_anon_mb(pid)), max(fds, open_fds(pid))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.2)
    return rss, fds


def attacker_process(attack, seconds: float, out: multiprocessing.SimpleQueue) -> None:
    """The attack in a process of its own (forked: `attack` is a closure), so that its event
    loop does not delay the health probes; it stops after `seconds` and hands back its stats."""

    async def main() -> dict:
        stop, stats = asyncio.Event(), {}
        task = asyncio.create_task(attack(stop, stats))
        await asyncio.sleep(seconds)
        stop.set()
        await task
        return stats

    out.put(asyncio.run(main()))


async def phase(node: NodeProcess, secs: float, attack, context: ssl.SSLContext | None) -> dict:
    """Run the attack, probe health for `secs` under it (after a second's ramp), stop it."""
    stop = asyncio.Event()
    before = rss_anon_mb(node.pid)
    cpu_before = cpu_secs(node.pid)
    sampler = asyncio.create_task(sample(node.pid, stop))
    ramp = 1.0 if attack else 0.0
    out: multiprocessing.SimpleQueue = multiprocessing.get_context("fork").SimpleQueue()
    child = None
    if attack is not None:
        child = multiprocessing.get_context("fork").Process(
            target=attacker_process, args=(attack, ramp + secs, out)
        )
        child.start()
    await asyncio.sleep(ramp)
    figures = await probe_health(node.url, secs, context)
    figures["node_cpu_share"] = round((cpu_secs(node.pid) - cpu_before) / (secs + ramp), 2)
    stats = {}
    if child is not None:
        stats = await asyncio.to_thread(out.get)
        child.join()
    stop.set()
    peak_rss, peak_fds = await sampler
    await asyncio.sleep(1.0)
    figures.update(
        node_fds_peak=peak_fds,
        rss_anon_before_mb=round(before, 1),
        rss_anon_peak_mb=round(peak_rss, 1),
        rss_anon_growth_mb=round(peak_rss - before, 1),
        rss_anon_after_mb=round(rss_anon_mb(node.pid), 1),
        **stats,
    )
    return figures


async def connect(
    port: int, address: str, stats: dict
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    """A connection from `address`, or None (counted, after a pause) when it failed."""
    try:
        return await asyncio.open_connection("127.0.0.1", port, local_addr=(address, 0))
    except OSError:
        stats["connect_errors"] += 1
        await asyncio.sleep(0.5)
        return None


async def _hold(reader: asyncio.StreamReader, every: float) -> bytes | None:
    """What the node sent (b"": it closed), or None when `every` passed first."""
    try:
        return await asyncio.wait_for(reader.read(1024), every)
    except TimeoutError:
        return None


Session = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[float]]


async def reconnecting(
    port: int, address: str, stop: asyncio.Event, stats: dict, session: Session
) -> None:
    """`session` on a new connection from `address`, again and again until `stop`; it returns
    how long to wait before the next one."""
    while not stop.is_set():
        connection = await connect(port, address, stats)
        if connection is None:
            continue
        stats["connects"] += 1
        reader, writer = connection
        try:
            pause = await session(reader, writer)
        except ConnectionError:
            stats["closed_by_node"] += 1
            pause = 0.0
        finally:
            writer.transport.abort()
        await asyncio.sleep(pause)


def slow_flood(port: int, count: int):
    def session(trickle: bool, stop: asyncio.Event, stats: dict) -> Session:
        async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> float:
            stats["open"] += 1
            stats["open_max"] = max(stats["open_max"], stats["open"])
            opened = time.monotonic()
            try:
                if trickle:
                    writer.write(b"GET /api/v1/health HTTP/1.1\r\n")
                while not stop.is_set():
                    try:
                        data = await asyncio.wait_for(reader.read(1024), 2.0)
                    except TimeoutError:
                        if trickle:
                            writer.write(b"X-Slow: 1\r\n")
                        continue
                    if data.startswith(b"HTTP/1.1 503"):
                        stats["refused_503"] += 1
                    if not data:
                        stats["closed_by_node"] += 1
                        stats["held_max_s"] = max(stats["held_max_s"], time.monotonic() - opened)
                        break
            finally:
                stats["open"] -= 1
            return 0.0

        return one

    async def attack(stop: asyncio.Event, stats: dict) -> None:
        stats.update(
            connections=count, connects=0, open=0, open_max=0, closed_by_node=0,
            refused_503=0, connect_errors=0, held_max_s=0.0,
        )  # fmt: skip
        clients = [
            reconnecting(port, address, stop, stats, session(i % 2 == 0, stop, stats))
            for i, address in enumerate(addresses("127.0.1", count))
        ]
        await asyncio.gather(*clients)
        stats["held_max_s"] = round(stats["held_max_s"], 2)
        del stats["open"]

    return attack


def keepalive_fill(port: int, count: int, every: float):
    """The issue's keep-alive fill: clients from several addresses (under the per-address cap)
    that each send GET /api/v1/health every `every` s on one kept-alive connection."""
    request = b"GET /api/v1/health HTTP/1.1\r\nHost: b\r\n\r\n"

    def session(stop: asyncio.Event, stats: dict) -> Session:
        async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> float:
            try:
                while not stop.is_set():
                    writer.write(request)
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
                    length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
                    await reader.readexactly(length)
                    stats["answered_200" if head.startswith(b"HTTP/1.1 200") else "refused"] += 1
                    if await asyncio.wait_for(idle_until_closed(reader, stop), every + 1):
                        stats["closed_by_node"] += 1
                        break
            except (asyncio.IncompleteReadError, IndexError, TimeoutError):
                stats["closed_by_node"] += 1
            return 0.2

        return one

    async def idle_until_closed(reader: asyncio.StreamReader, stop: asyncio.Event) -> bool:
        """Idle until it is time for the next request (False), or the node closes (True)."""
        end = time.monotonic() + every
        while not stop.is_set() and time.monotonic() < end:
            try:
                if await asyncio.wait_for(reader.read(1), 0.5) == b"":
                    return True
            except TimeoutError:
                continue
        return False

    async def attack(stop: asyncio.Event, stats: dict) -> None:
        stats.update(clients=count, every_s=every, connects=0, answered_200=0, refused=0,
                     closed_by_node=0, connect_errors=0)  # fmt: skip
        per_address = 250  # under the node's 256
        await asyncio.gather(
            *(
                reconnecting(port, a, stop, stats, session(stop, stats))
                for a in addresses("127.0.2", count, per_address)
            )
        )

    return attack


def _multipart(boundary: str) -> bytes:
    return (
        f'--{boundary}\r\nContent-Disposition: form-data; name="id"\r\n\r\nslow\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="wasm"; filename="a.wasm"\r\n'
        "Content-Type: application/wasm\r\n\r\n"
    ).encode()


# (method, path, token, content type, what is sent at once, what trickles): every door
DOORS = [
    ("POST", "/a2a/worker", READ_TOKEN, "application/json", b"",
     b'{"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}'),
    ("POST", "/api/v1/mcp/worker", OPERATE_TOKEN, "application/json", b"",
     b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}'),
    ("PATCH", "/api/v1/agents/worker", ADMIN_TOKEN, "application/merge-patch+json", b"",
     b'{"description": "slow"}'),
    ("POST", "/api/v1/sync/envelopes", ADMIN_TOKEN, "application/json", b"",
     b'{"peer_id": "admin", "envelopes": []}'),
    ("POST", "/api/v1/registry/packages", PUBLISH_TOKEN, "multipart/form-data; boundary=b",
     _multipart("b"), b"\0asm" * 64),
    ("POST", "/api/v1/findings", OPERATE_TOKEN, "application/json", b"",
     b'{"agent": "slow", "severity": "low", "title": "slow"}'),
]  # fmt: skip


def slow_bodies(port: int, count: int):
    """Requests whose bodies trickle a byte every TRICKLE_SECS, spread over every door."""

    def session(door: int, stop: asyncio.Event, stats: dict) -> Session:
        method, path, token, content_type, head, trickle = DOORS[door % len(DOORS)]

        async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> float:
            writer.write(
                f"{method} {path} HTTP/1.1\r\nHost: b\r\nAuthorization: Bearer {token}\r\n"
                f"Content-Type: {content_type}\r\n"
                f"Content-Length: {len(head) + len(trickle)}\r\n\r\n".encode()
                + head
            )
            answer: bytes | None = None
            try:
                for byte in trickle:
                    writer.write(bytes([byte]))
                    answer = await _hold(reader, TRICKLE_SECS)
                    if answer is not None or stop.is_set():
                        break
            except ConnectionError:
                answer = b""
            if answer is None:
                return 0.0  # the phase ended first
            status = answer[9:12].decode(errors="replace") if answer else "closed"
            stats["answers"][status] = stats["answers"].get(status, 0) + 1
            # then again: after Retry-After (1 s) when told to wait (a flood of reconnections
            # is a connection-rate attack, a proxy's to limit: docs/security.md), else at once
            return 1.0 if status in ("429", "503") else 0.2

        return one

    async def attack(stop: asyncio.Event, stats: dict) -> None:
        stats.update(requests=count, connects=0, closed_by_node=0, connect_errors=0, answers={})
        await asyncio.gather(
            *(
                reconnecting(port, a, stop, stats, session(i, stop, stats))
                for i, a in enumerate(addresses("127.0.3", count))
            )
        )

    return attack


def never_read(port: int, count: int, requests: list[bytes]):
    async def attack(stop: asyncio.Event, stats: dict) -> None:
        socks = []
        for i in range(count):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
            sock.send(requests[i % len(requests)])
            socks.append(sock)
        stats.update(clients=count, dropped_by_node=0)
        await stop.wait()
        for sock in socks:  # dropped: the node closed it before its response was read
            sock.setblocking(True)
            sock.settimeout(0.05)
            try:
                while sock.recv(1 << 20):
                    pass
                stats["dropped_by_node"] += 1  # reached the end: it was closed
            except ConnectionResetError:
                stats["dropped_by_node"] += 1
            except TimeoutError:
                pass  # still open, its response waiting
            sock.close()

    return attack


def read_request(method: str, path: str, body: bytes = b"") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: b\r\nAuthorization: Bearer {READ_TOKEN}\r\n"
    if body:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


def sse_replay(port: int, clients: int):
    async def one(stop: asyncio.Event, stats: dict) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
        writer.write(
            f"GET /api/v1/events HTTP/1.0\r\nHost: b\r\nAuthorization: Bearer {READ_TOKEN}\r\n"
            "Last-Event-ID: 0\r\n\r\n".encode()
        )
        try:
            while not stop.is_set():
                try:
                    chunk = await asyncio.wait_for(reader.read(1 << 16), 0.5)
                except TimeoutError:
                    continue
                if not chunk:
                    break
                stats["bytes_read"] += len(chunk)
                stats["events_read"] += chunk.count(b"\nid: ") + chunk.startswith(b"id: ")
        except ConnectionError:
            pass
        finally:
            writer.transport.abort()

    async def attack(stop: asyncio.Event, stats: dict) -> None:
        stats.update(clients=clients, bytes_read=0, events_read=0)
        await asyncio.gather(*(one(stop, stats) for _ in range(clients)))

    return attack


def tls_handshake_flood(port: int, count: int):
    """Plain TCP connections to the TLS port that send no ClientHello (half) or its first
    bytes (half), each reconnecting when the node closes it (the issue's fd exhaustion)."""

    def session(hello: bytes, stop: asyncio.Event, stats: dict) -> Session:
        async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> float:
            opened = time.monotonic()
            writer.write(hello)
            while not stop.is_set():
                try:
                    if await asyncio.wait_for(reader.read(1024), 1.0) == b"":
                        stats["closed_by_node"] += 1
                        stats["held_max_s"] = max(stats["held_max_s"], time.monotonic() - opened)
                        break
                except TimeoutError:
                    continue
            return 0.0

        return one

    async def attack(stop: asyncio.Event, stats: dict) -> None:
        stats.update(connections=count, connects=0, closed_by_node=0, connect_errors=0,
                     held_max_s=0.0)  # fmt: skip
        hellos = (b"\x16\x03\x01\x02\x00", b"")
        await asyncio.gather(
            *(
                reconnecting(port, a, stop, stats, session(hellos[i % 2], stop, stats))
                for i, a in enumerate(addresses("127.0.4", count))
            )
        )
        stats["held_max_s"] = round(stats["held_max_s"], 2)

    return attack


def populate(node: NodeProcess, findings: int, tasks: int) -> None:
    """60 KB findings and 60 KB tasks, as in the issue's report."""
    with httpx.Client(base_url=node.url, headers=auth(OPERATE_TOKEN), timeout=30) as client:
        for i in range(findings):
            body = {"agent": "node-a", "severity": "low", "title": f"f{i}", "detail": "x" * 60_000}
            assert client.post("/api/v1/findings", json=body).status_code == 201
        for i in range(tasks):
            body = {"from": "bench", "to": "worker", "input": {"blob": "y" * 60_000, "n": i}}
            response = client.post("/api/v1/a2a/tasks", json=body)
            assert response.status_code == 201, response.text


PLAIN_PHASES = ("slow_flood", "keepalive_fill", "slow_bodies", "never_read", "sse_replay")
TLS_PHASES = ("tls_handshake_flood",)


async def run(node: NodeProcess, args: argparse.Namespace, tls: ssl.SSLContext | None) -> dict:
    port = int(node.config.node.listen.rsplit(":", 1)[1])
    list_tasks = b'{"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"pageSize": 100}}'
    big = [
        read_request("GET", "/api/v1/findings?limit=1000"),
        read_request("GET", "/api/v1/a2a/tasks"),
        read_request("GET", "/api/v1/logs?limit=1000"),
        read_request("POST", "/a2a/worker", list_tasks),
    ]
    attacks = {
        "slow_flood": lambda: slow_flood(port, args.flood or args.fds - 64),
        "keepalive_fill": lambda: keepalive_fill(
            port, args.keepalive_clients or args.fds, args.keepalive_every
        ),
        "slow_bodies": lambda: slow_bodies(port, args.slow_bodies or args.fds),
        "never_read": lambda: never_read(port, args.never_readers, big),
        "sse_replay": lambda: sse_replay(port, 10),
        "tls_handshake_flood": lambda: tls_handshake_flood(port, 2 * args.fds),
    }
    names = [n for n in (TLS_PHASES if tls else PLAIN_PHASES) if n in args.phases]
    unloaded = "unloaded_tls" if tls else "unloaded"
    figures = {unloaded: await phase(node, args.secs, None, tls)}
    print(unloaded, figures[unloaded], flush=True)
    for name in names:
        figures[name] = await phase(node, args.secs, attacks[name](), tls)
        figures[name]["fd_limit"] = args.fds
        print(name, figures[name], flush=True)
    baseline = figures[unloaded]["health_p99_ms"]
    for name in names:
        loaded = figures[name]["health_p99_ms"]
        ratio = round(loaded / baseline, 2) if loaded is not None and baseline else None
        figures[name]["health_p99_vs_unloaded"] = ratio
    return figures


def measure(tree: Path, args: argparse.Namespace, node_keys: str) -> dict:
    """Every phase against a fresh node of `tree`, populated alike: the plain node's, then the
    TLS node's."""
    figures: dict = {}
    with tempfile.TemporaryDirectory(prefix="hostile-load-") as tmp:
        directory = Path(tmp)
        tiny_component(directory / "agent.wasm")
        agents = '\n[[agents]]\nname = "worker"\ncomponent = "agent.wasm"\nmcp = true\n'
        if any(n in args.phases for n in PLAIN_PHASES):
            path = write_config(directory / "plain", agents, node=node_keys)
            tiny_component(directory / "plain" / "agent.wasm")
            prefill(directory / "plain", args.journal)
            node = node_of(tree, path, args.fds)
            with node:
                started = time.monotonic()
                populate(node, args.findings, args.tasks)
                print(f"{tree}: populated in {time.monotonic() - started:.1f}s", flush=True)
                figures.update(asyncio.run(run(node, args, None)))
        if any(n in args.phases for n in TLS_PHASES):
            ca = make_ca(directory)
            cert, key = make_server_cert(directory / "tls", ca)
            path = with_tls(write_config(directory / "tls-node", agents, node=node_keys), cert, key)
            tiny_component(directory / "tls-node" / "agent.wasm")
            node = node_of(tree, path, args.fds, ca[0])
            with node:
                context = ssl.create_default_context(cafile=str(ca[0]))
                figures.update(asyncio.run(run(node, args, context)))
    return figures


def node_of(tree: Path, path: Path, fds: int, ca: Path | None = None) -> NodeProcess:
    node = NodeProcess(path, ca_file=ca)
    node.root = tree
    node.preexec_fn = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (fds, fds))
    return node


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fds", type=int, default=2048, help="the node's RLIMIT_NOFILE")
    parser.add_argument("--secs", type=float, default=8.0, help="health probing per phase")
    parser.add_argument("--flood", type=int, default=0, help="slow clients (0: fds - 64)")
    parser.add_argument("--keepalive-clients", type=int, default=0, help="0: fds")
    parser.add_argument("--keepalive-every", type=float, default=15.0)
    parser.add_argument("--slow-bodies", type=int, default=0, help="0: fds")
    parser.add_argument("--never-readers", type=int, default=64)
    parser.add_argument("--journal", type=int, default=100_000, help="events before start")
    parser.add_argument("--findings", type=int, default=200, help="60 KB findings")
    parser.add_argument("--tasks", type=int, default=800, help="60 KB tasks")
    parser.add_argument("--write-timeout", type=float, default=3.0)
    parser.add_argument("--phases", default=",".join(PLAIN_PHASES + TLS_PHASES))
    parser.add_argument("--base", help="a commit to measure after this tree, with its defaults")
    args = parser.parse_args()
    args.phases = args.phases.split(",")
    needed = 4 * args.fds + 512  # the attacks' own sockets, two phases' worth at most
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(needed, hard), hard))
    figures = measure(ROOT, args, f"write_timeout_secs = {args.write_timeout}\n")
    if args.base:
        with tempfile.TemporaryDirectory(prefix="hostile-load-base-") as tmp:
            figures["base"] = measure(export(args.base, Path(tmp)), args, "")
            figures["base"]["commit"] = args.base
    figures["setup"] = {
        "fds": args.fds,
        "flood": args.flood or args.fds - 64,
        "keepalive_clients": args.keepalive_clients or args.fds,
        "keepalive_every_s": args.keepalive_every,
        "slow_bodies": args.slow_bodies or args.fds,
        "tls_handshake_flood": 2 * args.fds,
        "secs": args.secs,
        "journal_events": args.journal,
        "findings_60kb": args.findings,
        "tasks_60kb": args.tasks,
        "never_readers": args.never_readers,
        "write_timeout_secs": args.write_timeout,
        "phases": args.phases,
    }
    report(figures)


if __name__ == "__main__":
    main()
