"""Ten concurrent replays from id 0 of a journal of big events, against a real node process:
the node's anonymous memory stays bounded (the replay reads and writes a bounded piece at a
time) and /health answers fast throughout (the reads do not hold the event loop)."""

from __future__ import annotations

import asyncio
import os
import random
import string
import time
from pathlib import Path

import httpx

from eventstore.keys import load_or_create_key
from eventstore.store import NewEvent
from node.app import open_store
from node.config.load import load_config
from tests.support import READ_TOKEN, NodeProcess, logs_on_failure, write_config

EVENTS = 240
EVENT_BYTES = 128 * 1024
CLIENTS = 10


def rss_anon_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no RssAnon in /proc status")


def prefill(config_path: Path) -> int:
    """Journal EVENTS big log events (as agents would) before the node starts; their positions
    run 1..EVENTS."""
    config = load_config(config_path)
    config.data_path.mkdir(parents=True, exist_ok=True)
    rng = random.Random(7)
    filler = "".join(rng.choices(string.ascii_letters, k=EVENT_BYTES))

    async def write() -> None:
        store = open_store(config, load_or_create_key(config.data_path))
        store.start()
        for i in range(0, EVENTS, 20):
            await store.append_many(
                [
                    NewEvent(f"agent-{j % 4}", "log", {"level": "info", "message": f"{j}{filler}"})
                    for j in range(i, i + 20)
                ]
            )
        await store.close()

    asyncio.run(write())
    return EVENTS


async def replay_all(port: int, last: int) -> int:
    """Resume from 0 over a raw HTTP/1.0 socket and read to the event with id `last`; returns
    the bytes read."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    writer.write(
        f"GET /api/v1/events HTTP/1.0\r\nHost: t\r\nAuthorization: Bearer {READ_TOKEN}\r\n"
        "Last-Event-ID: 0\r\n\r\n".encode()
    )
    head = await reader.readuntil(b"\r\n\r\n")
    assert b" 200 " in head.split(b"\r\n", 1)[0], head
    marker = f"id: {last}\n".encode()
    total, tail = 0, b""
    try:
        while True:
            chunk = await asyncio.wait_for(reader.read(1 << 16), 30)
            assert chunk, "the stream ended before the last event"
            total += len(chunk)
            if marker in tail + chunk:
                return total
            tail = chunk[-32:]
    finally:
        writer.transport.abort()


async def watch(pid: int, url: str, done: asyncio.Event) -> tuple[float, list[float]]:
    """The peak RssAnon, and /health's latencies, sampled until `done`."""
    peak, latencies = 0.0, []
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        while not done.is_set():
            peak = max(peak, rss_anon_mb(pid))
            started = time.perf_counter()
            assert (await http.get("/api/v1/health")).status_code == 200
            latencies.append(time.perf_counter() - started)
            await asyncio.sleep(0.05)
    return max(peak, rss_anon_mb(pid)), latencies


async def ten_replays(node: NodeProcess, port: int) -> tuple[float, list[float], list[int]]:
    done = asyncio.Event()
    watcher = asyncio.create_task(watch(node.pid, node.url, done))
    try:
        sizes = await asyncio.gather(*(replay_all(port, EVENTS) for _ in range(CLIENTS)))
    finally:
        done.set()
    peak, latencies = await watcher
    return peak, latencies, list(sizes)


def test_ten_replays_of_big_events_keep_memory_bounded_and_health_fast(tmp_path):
    # the replay caps are raised so that all ten run at once: the bound must come from how a
    # replay reads and writes, not from refusing replays
    path = write_config(tmp_path)
    path.write_text(
        path.read_text().replace(
            'data_dir = "data"', 'data_dir = "data"\nsse_replays_per_token = 10\nmap_size_mb = 256'
        )
    )
    prefill(path)
    node = NodeProcess(path)
    port = int(node.url.rsplit(":", 1)[1])
    with node, logs_on_failure(node.log_path):
        time.sleep(0.5)  # the start's folding settles
        baseline = rss_anon_mb(node.pid)
        peak, latencies, sizes = asyncio.run(ten_replays(node, port))
        after = rss_anon_mb(node.pid)
        journal_mb = EVENTS * EVENT_BYTES / 2**20
        print(
            f"journal {journal_mb:.0f} MB, {CLIENTS} replays of {min(sizes) / 2**20:.0f} MB: "
            f"RssAnon {baseline:.0f} -> peak {peak:.0f} -> {after:.0f} MB; /health "
            f"max {max(latencies) * 1000:.0f} ms over {len(latencies)} probes (pid {os.getpid()})"
        )
        assert all(size > (EVENTS - 1) * EVENT_BYTES for size in sizes)  # each: the whole journal
        # before the byte-bounded replay, each of the ten held the whole 30 MB journal several
        # times over (envelopes, decoded data, frames, one joined write): +1.3 GB, /health 3.4 s
        assert peak - baseline < 100, (baseline, peak)
        assert after - baseline < 100, (baseline, after)  # and it is not held after (was 1.4 GB)
        assert max(latencies) < 1.0, sorted(latencies)[-5:]
        assert node.terminate() == 0
