"""Benchmarks of the SSE streams against a real node process (`python -m node run`).

1. Fan-out: N subscribers (1,000) on /api/v1/events while findings are POSTed at a steady rate.
   Latency of each event from its commit (its `ts`, stamped as the writer builds the
   transaction, so fsync is included) to its arrival at the LAST subscriber: p50/p99/max; every
   subscriber must get every event. Node RSS before the subscribers, with them, after the run.
2. Stalled clients: K clients that never read while E events of ~1 KB are journaled: node RSS
   sampled after each third of the events, next to a baseline run without stalled clients (the
   findings read model grows either way). The difference must stay bounded: each client's queue
   holds at most `sse_queue_max` events (10,000 by default), past it the client is cut.
3. Resumption: R events (100,000) written to the journal before the node starts; one client
   resumes from id 0 and reads them all: events/s from request to the last event.

The clients are raw asyncio sockets speaking HTTP/1.0 (no chunking, the stream runs to close),
so the client side costs little next to the node. Run:
  .venv/bin/python bench/streams.py [--subscribers 1000] [--events 200] [--rate 25]
      [--stalled 5] [--stalled-events 30000] [--resume 100000]
The last line printed is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from eventstore.keys import load_or_create_key  # noqa: E402
from eventstore.store import NewEvent  # noqa: E402
from harness.node import ADMIN_TOKEN, OPERATE_TOKEN, NodeProcess, write_config  # noqa: E402
from node.app import open_store  # noqa: E402
from node.config.load import load_config  # noqa: E402
from node.ops.polling import until  # noqa: E402


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_secs(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def epoch(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def start_node(directory: Path, node_extra: str = "") -> NodeProcess:
    path = write_config(directory)
    text = path.read_text().replace("shutdown_drain_secs = 0.3", "shutdown_drain_secs = 0.1")
    if node_extra:
        text = text.replace('data_dir = "data"', f'data_dir = "data"\n{node_extra}')
    path.write_text(text)
    return NodeProcess(path)


class RawSse:
    """An HTTP/1.0 SSE client that splits frames and hands (id, frame) to a callback."""

    def __init__(self, port: int, path: str, *, rcvbuf: int | None = None) -> None:
        self.port = port
        self.path = path
        self.rcvbuf = rcvbuf
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def connect(self, last_id: int | None = None) -> None:
        sock = socket.socket()
        if self.rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.rcvbuf)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", self.port))
        self.reader, self.writer = await asyncio.open_connection(sock=sock, limit=1 << 20)
        resume = f"Last-Event-ID: {last_id}\r\n" if last_id is not None else ""
        self.writer.write(
            f"GET {self.path} HTTP/1.0\r\nHost: bench\r\n"
            f"Authorization: Bearer {ADMIN_TOKEN}\r\n{resume}\r\n".encode()
        )
        head = await self.reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.") or b" 200 " not in head.split(b"\r\n", 1)[0]:
            raise RuntimeError(f"stream refused: {head[:200]!r}")

    async def frames(self, on_frame) -> None:
        """Calls on_frame(id, frame) for each complete frame until the stream ends."""
        assert self.reader is not None
        buffer = b""
        while chunk := await self.reader.read(1 << 16):
            buffer += chunk
            start = 0
            while (end := buffer.find(b"\n\n", start)) >= 0:
                frame = buffer[start:end]
                start = end + 2
                if frame.startswith(b"id: "):
                    on_frame(int(frame[4 : frame.index(b"\n")]), frame)
            buffer = buffer[start:]

    def close(self) -> None:
        if self.writer is not None:
            self.writer.transport.abort()


async def fanout(node: NodeProcess, subscribers: int, events: int, rate: float) -> dict:
    pid = node.proc.pid
    rss_idle = rss_mb(pid)
    clients = [RawSse(node.config_port, "/api/v1/events") for _ in range(subscribers)]
    for i in range(0, subscribers, 100):  # connect in waves: the accept backlog is finite
        await asyncio.gather(*(c.connect() for c in clients[i : i + 100]))
    rss_connected = rss_mb(pid)
    arrivals: dict[int, float] = {}
    counts: dict[int, int] = {}
    commit_ts: dict[int, float] = {}

    def on_frame(event_id: int, frame: bytes) -> None:
        now = time.time()
        arrivals[event_id] = now  # the callback order makes the last writer the last arrival
        counts[event_id] = counts.get(event_id, 0) + 1
        if event_id not in commit_ts:
            data = frame[frame.index(b"data: ") + 6 :]
            commit_ts[event_id] = epoch(json.loads(data)["ts"])

    readers = [asyncio.create_task(c.frames(on_frame)) for c in clients]
    cpu_before = cpu_secs(pid)
    async with httpx.AsyncClient(
        base_url=node.url, headers={"Authorization": f"Bearer {OPERATE_TOKEN}"}
    ) as http:
        started = time.monotonic()
        for i in range(events):
            await asyncio.sleep(max(0.0, started + i / rate - time.monotonic()))
            response = await http.post(
                "/api/v1/findings",
                json={"agent": "node-a", "severity": "info", "title": f"event {i}"},
            )
            response.raise_for_status()
    await until(
        lambda: len(counts) >= events and all(n >= subscribers for n in counts.values()),
        60,
        "every subscriber got every event",
        0.05,
    )
    rss_after = rss_mb(pid)
    cpu = cpu_secs(pid) - cpu_before
    for client in clients:
        client.close()
    await asyncio.gather(*readers, return_exceptions=True)
    latencies = [(arrivals[i] - commit_ts[i]) * 1000 for i in arrivals]
    delivered = sum(counts.values())
    return {
        "subscribers": subscribers,
        "events": events,
        "rate_per_s": rate,
        "delivered": delivered,
        "lost": subscribers * events - delivered,
        "latency_ms_p50": round(pct(latencies, 50), 2),
        "latency_ms_p99": round(pct(latencies, 99), 2),
        "latency_ms_max": round(max(latencies), 2),
        "node_cpu_us_per_delivery": round(cpu / max(delivered, 1) * 1e6, 1),
        "rss_mb_idle": round(rss_idle, 1),
        "rss_mb_connected": round(rss_connected, 1),
        "rss_mb_after": round(rss_after, 1),
    }


async def stalled(node: NodeProcess, count: int, events: int) -> dict:
    pid = node.proc.pid
    clients = [RawSse(node.config_port, "/api/v1/events", rcvbuf=4096) for _ in range(count)]
    for client in clients:
        await client.connect()  # and never read again
    samples = [rss_mb(pid)]
    detail = "x" * 1000
    sent = 0
    async with httpx.AsyncClient(
        base_url=node.url, headers={"Authorization": f"Bearer {OPERATE_TOKEN}"}, timeout=60
    ) as http:

        async def post(i: int) -> None:
            body = {"agent": "node-a", "severity": "info", "title": str(i), "detail": detail}
            (await http.post("/api/v1/findings", json=body)).raise_for_status()

        for third in range(3):
            target = events * (third + 1) // 3
            while sent < target:
                batch = min(32, target - sent)  # concurrent posts: group commit
                await asyncio.gather(*(post(sent + j) for j in range(batch)))
                sent += batch
            samples.append(rss_mb(pid))
    for client in clients:
        client.close()
    cuts = node.log_path.read_text().count("SSE client on events cut")
    return {
        "stalled_clients": count,
        "stalled_events": events,
        "stalled_cut": cuts,
        "rss_mb_samples": [round(s, 1) for s in samples],
        "rss_mb_growth": round(samples[-1] - samples[0], 1),
        "rss_mb_growth_last_third": round(samples[-1] - samples[-2], 1),
    }


def prefill(directory: Path, events: int) -> None:
    """Write `events` journal events (as the node would) before the node starts."""
    config = load_config(directory / "runtime.toml")

    async def write() -> None:
        store = open_store(config, load_or_create_key(config.data_path))
        store.start()
        for i in range(0, events, 1000):
            await store.append_many(
                [
                    NewEvent(f"agent-{j % 10}", "log", {"level": "info", "message": f"m{j}"})
                    for j in range(i, min(events, i + 1000))
                ]
            )
        await store.close()

    config.data_path.mkdir(parents=True, exist_ok=True)
    asyncio.run(write())


async def resume(node: NodeProcess, events: int) -> dict:
    client = RawSse(node.config_port, "/api/v1/events")
    done = asyncio.Event()
    seen = {"count": 0, "last": 0, "in_order": True}

    def on_frame(event_id: int, frame: bytes) -> None:
        seen["in_order"] &= event_id == seen["last"] + 1
        seen["last"] = event_id
        seen["count"] += 1
        if event_id >= events:
            done.set()

    started = time.perf_counter()
    await client.connect(last_id=0)
    reader = asyncio.create_task(client.frames(on_frame))
    await asyncio.wait_for(done.wait(), 300)
    elapsed = time.perf_counter() - started
    client.close()
    await asyncio.gather(reader, return_exceptions=True)
    return {
        "resume_events": seen["count"],
        "resume_in_order": seen["in_order"],
        "resume_secs": round(elapsed, 3),
        "resume_events_per_s": round(seen["count"] / elapsed),
    }


def run_with_node(directory: Path, scenario, *args, node_extra: str = "") -> dict:
    node = start_node(directory, node_extra)
    node.config_port = int(node.url.rsplit(":", 1)[1])
    node.start()
    try:
        result = asyncio.run(scenario(node, *args))
        started = time.monotonic()
        code = node.terminate()
        result[f"{scenario.__name__}_shutdown_secs"] = round(time.monotonic() - started, 2)
        result[f"{scenario.__name__}_exit_code"] = code
    finally:
        node.kill()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--rate", type=float, default=25.0)
    parser.add_argument("--stalled", type=int, default=5)
    parser.add_argument("--stalled-events", type=int, default=30_000)
    parser.add_argument("--resume", type=int, default=100_000)
    args = parser.parse_args()
    figures: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        # every subscriber shows the one admin token: the per-token cap must let them all in
        caps = f"sse_streams_per_token = {args.subscribers}\nsse_streams_max = {args.subscribers}"
        figures |= run_with_node(
            base / "fanout", fanout, args.subscribers, args.events, args.rate, node_extra=caps
        )
        print("fan-out:", json.dumps(figures), flush=True)
        # the findings read model grows with every event whatever SSE does: a run without
        # stalled clients is the baseline, the difference is what the stalled clients cost
        baseline = run_with_node(base / "baseline", stalled, 0, args.stalled_events)
        stall = run_with_node(base / "stalled", stalled, args.stalled, args.stalled_events)
        print("baseline:", json.dumps(baseline), flush=True)
        print("stalled:", json.dumps(stall), flush=True)
        figures |= stall
        figures["rss_mb_growth_baseline"] = baseline["rss_mb_growth"]
        figures["rss_mb_stalled_overhead"] = round(
            stall["rss_mb_growth"] - baseline["rss_mb_growth"], 1
        )
        write_config(base / "resume")
        prefill(base / "resume", args.resume)
        res = run_with_node(base / "resume", resume, args.resume)
        print("resume:", json.dumps(res), flush=True)
        figures |= res
    print(json.dumps({"bench": "streams", **figures}))


if __name__ == "__main__":
    main()
