"""Operator API latency and throughput, next to a bare aiohttp handler measured in the same run.

(a) with 10,000 pending approvals: GET /api/v1/approvals and /api/v1/approvals/batched latency
    (p50/p99 over sequential requests) and POST /api/v1/approvals/batch of 1,000 ids;
(b) POST /api/v1/a2a/tasks, then GET /api/v1/a2a/tasks/{id} of each, at concurrency 64, vs a
    bare aiohttp app that parses the same JSON and answers a task-sized object (target: the node
    does at least 0.4 of the bare rate).

The pending approvals are written into the journal before the node starts (as a runtime would
have), so the start-up also re-arms 10,000 timers. Servers run in subprocesses; the client is
this process; task rounds alternate node and bare, and the median round is reported.
Run: .venv/bin/python bench/api.py [--approvals 10000] [--requests 3000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import percentile, report, start_process, stop_process
from eventstore.keys import load_or_create_key
from eventstore.store import EventStore, NewEvent
from harness.node import ADMIN_TOKEN, NodeProcess, auth, free_port, tiny_component, write_config
from node.app import JOURNAL_DIR
from node.config.load import load_config

CONCURRENCY = 64
AGENTS = """
[[agents]]
name = "worker"
component = "agent.wasm"
"""


# ----------------------------------------------------------------------------- the bare peer
def run_bare_server(port: int) -> None:
    """The peer: aiohttp parsing the same JSON and answering objects of the same shape."""
    from aiohttp import web

    tasks: dict[str, dict] = {}

    async def create(request: web.Request) -> web.Response:
        body = await request.json()
        task_id = str(uuid.uuid4())
        tasks[task_id] = {**body, "id": task_id, "status": "pending"}
        return web.json_response({"id": task_id, "status": "pending"}, status=201)

    async def read(request: web.Request) -> web.Response:
        return web.json_response(tasks[request.match_info["task_id"]])

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application()
    app.router.add_post("/api/v1/a2a/tasks", create)
    app.router.add_get("/api/v1/a2a/tasks/{task_id}", read)
    app.router.add_get("/api/v1/health", health)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


# ----------------------------------------------------------------------------- load
async def load(
    session: aiohttp.ClientSession,
    method: str,
    url: Callable[[int], str],
    count: int,
    *,
    body: Callable[[int], dict] | None = None,
    expect: int = 200,
    keep: list | None = None,
) -> dict[str, float]:
    """`count` requests over CONCURRENCY keep-alive workers; rate and latency percentiles."""
    latencies: list[float] = []
    counter = iter(range(count))
    failures = 0

    async def worker() -> None:
        nonlocal failures
        for i in counter:
            started = time.perf_counter()
            async with session.request(method, url(i), json=body(i) if body else None) as r:
                data = await r.json()
                if r.status != expect:
                    failures += 1
                elif keep is not None:
                    keep.append(data["id"])
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    elapsed = time.perf_counter() - started
    return {
        "rps": round(count / elapsed, 1),
        "p50_ms": round(percentile(latencies, 0.5) * 1000, 2),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
        "failures": failures,
    }


async def tasks_round(base: str, requests: int, headers: dict[str, str]) -> dict[str, dict]:
    """POST `requests` tasks, then GET each one back, both at concurrency 64 (after a warm-up)."""
    body = lambda i: {"from": "planner", "to": "worker", "input": {"invoice": i, "eur": 10}}  # noqa: E731
    connector = aiohttp.TCPConnector(limit=CONCURRENCY)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        warm: list[str] = []
        create_url = lambda i: f"{base}/api/v1/a2a/tasks"  # noqa: E731
        await load(session, "POST", create_url, 300, body=body, expect=201, keep=warm)
        ids: list[str] = []
        post = await load(session, "POST", create_url, requests, body=body, expect=201, keep=ids)
        get = await load(session, "GET", lambda i: f"{base}/api/v1/a2a/tasks/{ids[i]}", len(ids))
    return {"post": post, "get": get}


# ----------------------------------------------------------------------------- approvals
async def preload_approvals(config_path: Path, count: int) -> None:
    """Journal `count` pending approval requests (1 h timeout) before the node starts."""
    config = load_config(config_path)
    store = EventStore(
        config.data_path / JOURNAL_DIR, load_or_create_key(config.data_path), config.node.name
    )
    store.start()
    capabilities = ("spend", "http_fetch", "email", "deploy")
    for start in range(0, count, 1000):
        await store.append_many(
            [
                NewEvent(
                    f"agent{i % 8}",
                    "approval.requested",
                    {
                        "id": str(uuid.uuid4()),
                        "capability": capabilities[i % len(capabilities)],
                        "detail": f"request {i}: pay invoice INV-{i:06d} of 10.00 EUR",
                        "timeout_secs": 3600,
                    },
                )
                for i in range(start, min(start + 1000, count))
            ]
        )
    await store.close()


async def approvals_round(base: str, samples: int) -> dict[str, float]:
    async with aiohttp.ClientSession(headers=auth(ADMIN_TOKEN)) as session:

        async def timed_get(path: str) -> tuple[list[float], int]:
            latencies, size = [], 0
            for _ in range(samples):
                started = time.perf_counter()
                async with session.get(base + path) as r:
                    raw = await r.read()
                    assert r.status == 200, raw[:200]
                latencies.append(time.perf_counter() - started)
                size = len(raw)
            return latencies, size

        await timed_get("/api/v1/approvals")  # warm-up
        listing, list_bytes = await timed_get("/api/v1/approvals")
        batched, batched_bytes = await timed_get("/api/v1/approvals/batched")
        async with session.get(base + "/api/v1/approvals") as r:
            pending = [item["id"] for item in await r.json()]
        batch_ms = []
        for round_ in range(3):
            ids = pending[round_ * 1000 : (round_ + 1) * 1000]
            started = time.perf_counter()
            async with session.post(
                base + "/api/v1/approvals/batch", json={"ids": ids, "decision": "approve"}
            ) as r:
                result = await r.json()
            batch_ms.append((time.perf_counter() - started) * 1000)
            assert result["decided"] == 1000, result
    return {
        "pending": len(pending),
        "list_p50_ms": round(percentile(listing, 0.5) * 1000, 1),
        "list_p99_ms": round(percentile(listing, 0.99) * 1000, 1),
        "list_bytes": list_bytes,
        "batched_p50_ms": round(percentile(batched, 0.5) * 1000, 1),
        "batched_p99_ms": round(percentile(batched, 0.99) * 1000, 1),
        "batched_bytes": batched_bytes,
        "batch_1000_ms": round(statistics.median(batch_ms), 1),
    }


# ----------------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--approvals", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=3_000)
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bare-server", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.approvals < 3000:  # the batch figure decides three batches of 1,000
        parser.error("--approvals: at least 3000")
    if args.bare_server:
        run_bare_server(args.bare_server)
        return
    tmp = Path(tempfile.mkdtemp(prefix="bench-api-"))
    port = free_port()
    bare = start_process(
        [sys.executable, "bench/api.py", "--bare-server", str(port)],
        f"http://127.0.0.1:{port}/api/v1/health",
    )
    rounds: list[tuple[dict, dict]] = []
    try:
        (tmp / "node").mkdir()
        tiny_component(tmp / "node" / "agent.wasm")
        config_path = write_config(tmp / "node", AGENTS)
        asyncio.run(preload_approvals(config_path, args.approvals))
        started = time.perf_counter()
        node = NodeProcess(config_path).start(timeout=120)
        start_s = time.perf_counter() - started
        try:
            approvals = asyncio.run(approvals_round(node.url, args.samples))
            # alternate node and bare rounds so that the machine's noise hits both alike
            for _ in range(args.rounds):
                ours = asyncio.run(tasks_round(node.url, args.requests, auth(ADMIN_TOKEN)))
                peer = asyncio.run(tasks_round(f"http://127.0.0.1:{port}", args.requests, {}))
                rounds.append((ours, peer))
        finally:
            node.terminate()
    finally:
        stop_process(bare)
        shutil.rmtree(tmp, ignore_errors=True)

    def median_round(kind: str) -> tuple[dict, dict, float]:
        ordered = sorted(rounds, key=lambda r: r[0][kind]["rps"] / r[1][kind]["rps"])
        ours, peer = ordered[len(ordered) // 2]
        return ours[kind], peer[kind], ours[kind]["rps"] / peer[kind]["rps"]

    post, bare_post, post_ratio = median_round("post")
    get, bare_get, get_ratio = median_round("get")
    print(f"node start with {args.approvals:,} pending approvals: {start_s:.2f} s")
    print(
        f"(a) GET approvals p50 {approvals['list_p50_ms']} ms p99 {approvals['list_p99_ms']} ms"
        f" ({approvals['list_bytes']:,} bytes); batched p50 {approvals['batched_p50_ms']} ms"
        f" p99 {approvals['batched_p99_ms']} ms; batch of 1,000: {approvals['batch_1000_ms']} ms"
    )
    for kind, mine, theirs, ratio in (
        ("POST", post, bare_post, post_ratio),
        ("GET", get, bare_get, get_ratio),
    ):
        print(
            f"(b) {kind} tasks {mine['rps']:,.0f} req/s (p50 {mine['p50_ms']} ms, p99"
            f" {mine['p99_ms']} ms) vs bare {theirs['rps']:,.0f}: {ratio:.2f}"
            f" (median of {len(rounds)} paired rounds)"
        )
    failures = sum(r["failures"] for pair in rounds for side in pair for r in side.values())
    report(
        {
            "bench": "api",
            "approvals_pending": approvals["pending"],
            "start_s": round(start_s, 2),
            **{f"approvals_{k}": v for k, v in approvals.items() if k != "pending"},
            "tasks_post_rps": post["rps"],
            "tasks_post_p99_ms": post["p99_ms"],
            "bare_post_rps": bare_post["rps"],
            "tasks_post_ratio": round(post_ratio, 2),
            "tasks_get_rps": get["rps"],
            "tasks_get_p99_ms": get["p99_ms"],
            "bare_get_rps": bare_get["rps"],
            "tasks_get_ratio": round(get_ratio, 2),
            "failures": failures,
        }
    )


if __name__ == "__main__":
    main()
