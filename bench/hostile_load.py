"""Hostile clients against a real node process on loopback: what each attack does to the node's
memory (RssAnon, /proc/PID/status) and to /api/v1/health's latency, next to the same node
unloaded, in the same run (node/web/connections.py, issue 34).

Attacks, one after the other, each for `--secs` while health is probed (a new connection per
probe, from 127.0.0.1, about 50 a second), RssAnon sampled every 0.2 s and the node's CPU
share taken:

1. slow_flood: up to near the node's fd limit (`--fds`, set in the node with setrlimit), or
   `--flood N`, of slow connections from many loopback addresses (127.0.1.x, 200 each): half
   send nothing, half a header line every 2 s; each reconnects when the node closes it.
2. never_read: `--never-readers` clients that ask for a large response (a page of 60 KB
   findings, the task list of 800 tasks of 60 KB) and never read it.
3. sse_replay: ten concurrent GET /api/v1/events with Last-Event-ID: 0 by a read token, over a
   journal of `--journal` events, read as fast as they come.

Bounded: every phase lasts `--secs`, every connection count is fixed. The node runs with its
defaults but for `write_timeout_secs` (`--write-timeout`, so that drops land within a phase).
The last line printed is one JSON object.

`--base COMMIT` runs every phase again against that commit's node (its defaults; exported with
git archive), after this tree's, under "base".

Usage: .venv/bin/python bench/hostile_load.py [--fds 2048] [--flood N] [--secs 8]
    [--never-readers 64] [--journal 100000] [--write-timeout 3] [--base COMMIT]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import resource
import socket
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, export, percentile, report
from bench.streams import prefill
from harness.node import (
    OPERATE_TOKEN,
    READ_TOKEN,
    NodeProcess,
    auth,
    tiny_component,
    write_config,
)

PER_ADDRESS = 200  # under the node's default per-client cap (256)


def rss_anon_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_secs(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


async def probe_health(url: str, secs: float) -> dict[str, float]:
    """GET /api/v1/health on a new connection each time, about 50 a second."""
    latencies: list[float] = []
    failures = 0
    connector = aiohttp.TCPConnector(force_close=True)
    timeout = aiohttp.ClientTimeout(total=2)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        end = time.monotonic() + secs
        while time.monotonic() < end:
            started = time.perf_counter()
            try:
                async with session.get(url + "/api/v1/health") as response:
                    await response.read()
                    ok = response.status == 200
            except (aiohttp.ClientError, TimeoutError):
                ok = False
            elapsed = time.perf_counter() - started
            if ok:
                latencies.append(elapsed)
            else:
                failures += 1
            await asyncio.sleep(max(0.0, 0.02 - elapsed))

    def ms(seconds: float) -> float | None:  # None (JSON null): no probe was answered
        return round(seconds * 1000, 2) if latencies else None

    return {
        "health_p50_ms": ms(percentile(latencies, 0.5)),
        "health_p99_ms": ms(percentile(latencies, 0.99)),
        "health_max_ms": ms(max(latencies, default=0.0)),
        "health_ok": len(latencies),
        "health_failed": failures,
    }


async def sample_rss(pid: int, stop: asyncio.Event) -> float:
    peak = 0.0
    while not stop.is_set():
        peak = max(peak, rss_anon_mb(pid))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.2)
    return peak


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


async def phase(node: NodeProcess, secs: float, attack) -> dict:
    """Run the attack, probe health for `secs` under it (after a second's ramp), stop it."""
    stop = asyncio.Event()
    before = rss_anon_mb(node.pid)
    cpu_before = cpu_secs(node.pid)
    sampler = asyncio.create_task(sample_rss(node.pid, stop))
    ramp = 1.0 if attack else 0.0
    out: multiprocessing.SimpleQueue = multiprocessing.get_context("fork").SimpleQueue()
    child = None
    if attack is not None:
        child = multiprocessing.get_context("fork").Process(
            target=attacker_process, args=(attack, ramp + secs, out)
        )
        child.start()
    await asyncio.sleep(ramp)
    figures = await probe_health(node.url, secs)
    figures["node_fds_under_load"] = open_fds(node.pid)
    figures["node_cpu_share"] = round((cpu_secs(node.pid) - cpu_before) / (secs + ramp), 2)
    stats = {}
    if child is not None:
        stats = await asyncio.to_thread(out.get)
        child.join()
    stop.set()
    peak = await sampler
    await asyncio.sleep(1.0)
    figures.update(
        rss_anon_before_mb=round(before, 1),
        rss_anon_peak_mb=round(peak, 1),
        rss_anon_after_mb=round(rss_anon_mb(node.pid), 1),
        **stats,
    )
    return figures


def slow_flood(port: int, count: int):
    async def one(address: str, trickle: bool, stop: asyncio.Event, stats: dict) -> None:
        while not stop.is_set():
            try:
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", port, local_addr=(address, 0)
                )
            except OSError:
                stats["connect_errors"] += 1
                await asyncio.sleep(0.5)
                continue
            stats["connects"] += 1
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
            except ConnectionError:
                stats["closed_by_node"] += 1
            finally:
                stats["open"] -= 1
                writer.transport.abort()

    async def attack(stop: asyncio.Event, stats: dict) -> None:
        stats.update(
            connections=count, connects=0, open=0, open_max=0, closed_by_node=0,
            refused_503=0, connect_errors=0, held_max_s=0.0,
        )  # fmt: skip
        clients = [
            one(f"127.0.1.{1 + i // PER_ADDRESS}", i % 2 == 0, stop, stats) for i in range(count)
        ]
        await asyncio.gather(*clients)
        stats["held_max_s"] = round(stats["held_max_s"], 2)
        del stats["open"]

    return attack


def never_read(port: int, count: int, paths: list[str]):
    async def attack(stop: asyncio.Event, stats: dict) -> None:
        socks = []
        for i in range(count):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
            path = paths[i % len(paths)]
            request = f"GET {path} HTTP/1.1\r\nHost: b\r\nAuthorization: Bearer {READ_TOKEN}\r\n"
            sock.send(request.encode() + b"\r\n")
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


async def run(node: NodeProcess, args: argparse.Namespace) -> dict:
    port = int(node.config.node.listen.rsplit(":", 1)[1])
    flood = args.flood or args.fds - 64  # near the fd limit
    big = ["/api/v1/findings?limit=1000", "/api/v1/a2a/tasks", "/api/v1/logs?limit=1000"]
    phases = {
        "unloaded": None,
        "slow_flood": slow_flood(port, flood),
        "never_read": never_read(port, args.never_readers, big),
        "sse_replay": sse_replay(port, 10),
    }
    figures = {}
    for name, attack in phases.items():
        figures[name] = await phase(node, args.secs, attack)
        print(name, figures[name], flush=True)
    unloaded = figures["unloaded"]["health_p99_ms"]
    for name in list(phases)[1:]:
        loaded = figures[name]["health_p99_ms"]
        ratio = round(loaded / unloaded, 2) if loaded is not None and unloaded else None
        figures[name]["health_p99_vs_unloaded"] = ratio
    return figures


def measure(tree: Path, args: argparse.Namespace, node_keys: str) -> dict:
    """Every phase against a fresh node of `tree`, populated alike."""
    with tempfile.TemporaryDirectory(prefix="hostile-load-") as tmp:
        directory = Path(tmp)
        tiny_component(directory / "agent.wasm")
        agents = '\n[[agents]]\nname = "worker"\ncomponent = "agent.wasm"\n'
        path = write_config(directory, agents, node=node_keys)
        prefill(directory, args.journal)
        node = NodeProcess(path)
        node.root = tree
        fds = args.fds
        node.preexec_fn = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (fds, fds))
        with node:
            started = time.monotonic()
            populate(node, args.findings, args.tasks)
            print(f"{tree}: populated in {time.monotonic() - started:.1f}s", flush=True)
            return asyncio.run(run(node, args))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fds", type=int, default=2048, help="the node's RLIMIT_NOFILE")
    parser.add_argument("--secs", type=float, default=8.0, help="health probing per phase")
    parser.add_argument("--flood", type=int, default=0, help="slow clients (0: fds - 64)")
    parser.add_argument("--never-readers", type=int, default=64)
    parser.add_argument("--journal", type=int, default=100_000, help="events before start")
    parser.add_argument("--findings", type=int, default=200, help="60 KB findings")
    parser.add_argument("--tasks", type=int, default=800, help="60 KB tasks")
    parser.add_argument("--write-timeout", type=float, default=3.0)
    parser.add_argument("--base", help="a commit to measure after this tree, with its defaults")
    args = parser.parse_args()
    needed = args.fds + 512
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
        "secs": args.secs,
        "journal_events": args.journal,
        "findings_60kb": args.findings,
        "tasks_60kb": args.tasks,
        "never_readers": args.never_readers,
        "write_timeout_secs": args.write_timeout,
    }
    report(figures)


if __name__ == "__main__":
    main()
