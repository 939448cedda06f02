"""The benches' shared harness: an HTTP load generator, servers in subprocesses, another
commit's tree to measure side by side (`export`), and the one JSON line every bench ends with.

The machine is shared and noisy, so every figure is reported next to a peer measured in the
same run (a raw limit or a bare handler) and compared as a ratio. Real nodes, meshes and NATS
clusters come from the top-level `harness` package, which the tests use too.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp

from node.ops.polling import DeadlineExceeded, wait_until

ROOT = Path(__file__).resolve().parent.parent
SIGNER = "eventstore/_sign_batch.abi3.so"  # built at install, not in git


def export(revision: str, into: Path) -> Path:
    """A directory holding `revision`'s files (`WT`: this working tree itself), with this
    tree's built C signer copied in, so both sides sign alike."""
    if revision == "WT":
        return ROOT
    target = into / revision.replace("/", "_")
    target.mkdir()
    archive = subprocess.run(
        ["git", "archive", revision], cwd=ROOT, check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    if (ROOT / SIGNER).exists():
        shutil.copy(ROOT / SIGNER, target / SIGNER)
    return target


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def p95(values: list[float]) -> float:
    """The failover benches' p95: the value at the 95 % rank, nearest (bench/failover*.py)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


async def http_load(
    url: str,
    *,
    concurrency: int,
    requests: int,
    method: str = "POST",
    body: Callable[[int], dict] | None = None,
    headers: dict[str, str] | None = None,
    expect: int = 201,
    url_of: Callable[[int], str] | None = None,
) -> dict[str, float]:
    """`requests` calls spread over `concurrency` keep-alive workers; returns rate and latency.
    `url_of(i)`: each call's own URL (instead of `url`)."""
    latencies: list[float] = []
    counter = iter(range(requests))
    failures = 0
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:

        async def worker() -> None:
            nonlocal failures
            for i in counter:
                started = time.perf_counter()
                target = url_of(i) if url_of else url
                async with session.request(method, target, json=body(i) if body else None) as r:
                    await r.read()
                    if r.status != expect:
                        failures += 1
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return {
        "requests_per_s": round(requests / elapsed, 1),
        "p50_ms": round(percentile(latencies, 0.5) * 1000, 2),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
        "failures": failures,
    }


def start_process(
    args: list[str], health_url: str, timeout: float = 30, cwd: Path = ROOT
) -> subprocess.Popen:
    """Start a server (from `cwd`: another tree runs that tree's code) and wait until it answers."""
    import httpx

    proc = subprocess.Popen(args, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def answers() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(proc.stderr.read().decode() if proc.stderr else "exited")
        return httpx.get(health_url, timeout=1) is not None

    try:
        wait_until(answers, timeout, f"{health_url} answers", retry_on=(httpx.HTTPError,))
    except DeadlineExceeded:
        proc.kill()
        raise
    return proc


def stop_process(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


def report(figures: dict) -> None:
    """The last line of every bench: one JSON object."""
    print(json.dumps(figures, separators=(", ", ": ")))
