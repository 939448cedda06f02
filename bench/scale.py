"""A node that runs for months (issue 16): start-up, heap, pages and appends against history.

For each size N (100k, 1M, 10M signed events over 100 agent journals, about 80 % logs, 10 %
findings, 10 % task events), a node data dir is built once through `node.app.open_store` (the
store exactly as the node configures it) and cached under `--root/<N>`. Then, for each revision
("new": this working tree; "base": a git worktree of `--base-commit`), on its own copy of that
data dir, with the node as a real subprocess (`python -m node run`):

- start to healthy: the first start (a copy without checkpoint), then after a clean stop
  (SIGTERM) and after `kill -9` (median of `--rounds`); before each kill, `--unsaved` findings
  are POSTed, so the restart has to recover what no checkpoint holds;
- heap: anonymous RSS (/proc/<pid>/smaps_rollup, which leaves out the mapped journal) once
  healthy and again after serving the pages;
- pages: GET /api/v1/logs and /api/v1/findings (limit 100) at the start, middle and end of
  history, `--requests` sequential requests each on one keep-alive session, p50/p99;
- disk: data.mdb and the bytes each LMDB database's pages take, per event.

Then durable appends/s of 64 producers (each awaiting its own `store.append` of a log event in
a loop, over 8 journals as bench/journal.py does: `--append-streams`) on an empty journal and
on a copy of the largest journal, opened by `build_app` (that is `node.app.open_store`, with the
node's in-memory projections folding each commit, as (a) of bench/journal.py), in a child
process per revision; rounds alternate which of the pair runs first, the median is reported.

Run: .venv/bin/python bench/scale.py [--sizes 100000,1000000] [--quick] [--rebuild]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from itertools import islice
from pathlib import Path
from statistics import median
from typing import Any

# "base" runs this file with AGENT_NODE_SRC pointing at its worktree (the appends child)
sys.path.insert(0, os.environ.get("AGENT_NODE_SRC") or str(Path(__file__).resolve().parent.parent))

import aiohttp
import lmdb
from tqdm import tqdm

from bench.common import http_load, percentile, report
from eventstore.keys import load_or_create_key
from eventstore.store import NewEvent
from node.app import build_app, open_store
from node.config.load import load_config
from node.context import CONTEXT
from node.ops.polling import DeadlineExceeded, wait_until
from projections import catalogue as c

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
AGENTS = [f"agent-{i:03d}" for i in range(100)]
NODE_NAME = "scale-node"
TOKEN = "scale-bench-admin-token-0001"
MARKER = "BUILT.json"
BATCH = 2000  # events per append_many while building
SIZES = (100_000, 1_000_000, 10_000_000)
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
SHOWN_LOG = re.compile(r"checkpoint|rebuil|fold|replay|position|refus|error|warn", re.I)


# ------------------------------------------------------------------------------ history


@dataclass
class Counts:
    events: int = 0
    logs: int = 0
    findings: int = 0
    task_events: int = 0
    tasks: int = 0
    tasks_pending: int = 0  # created, never started
    tasks_running: int = 0  # started, not completed when the history ends
    tasks_completed: int = 0


class History:
    """A deterministic mix of events: what 100 agents write over months, in order.

    Task events move about 100 tasks along at a time (created, later started, later completed,
    each in the journal of the task's agent); 1 % of tasks are never started.
    """

    IN_FLIGHT = 100

    def __init__(self, seed: int = 16) -> None:
        self.rng = random.Random(seed)
        self.counts = Counts()
        self._in_flight: deque[tuple[str, str, bool]] = deque()  # (id, agent, started)
        self._never_started = 0

    def events(self, n: int) -> Iterator[NewEvent]:
        rng, counts = self.rng, self.counts
        for i in range(n):
            agent = AGENTS[rng.randrange(100)]
            r = rng.random()
            counts.events += 1
            if r < 0.8:
                counts.logs += 1
                message = (
                    f"request {i:09d} served in {rng.randrange(1000):3d} ms "
                    f"from cache shard {rng.randrange(100):02d} ok"
                )
                yield NewEvent(agent, c.LOG, {"level": "info", "message": message})
            elif r < 0.9:
                counts.findings += 1
                data = {
                    "severity": "low",
                    "title": f"disk almost full on host-{rng.randrange(1000):03d}",
                    "detail": f"{rng.randrange(80, 100)}% used on /var/lib/{agent} (check {i})",
                }
                yield NewEvent(agent, c.FINDING, data)
            else:
                counts.task_events += 1
                yield self._task_step(agent, i)
        counts.tasks_running = sum(started for _, _, started in self._in_flight)
        counts.tasks_pending = self._never_started + len(self._in_flight) - counts.tasks_running

    def _task_step(self, agent: str, i: int) -> NewEvent:
        rng, counts = self.rng, self.counts
        if len(self._in_flight) < self.IN_FLIGHT or rng.random() < 1 / 3:
            task_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
            counts.tasks += 1
            if rng.random() < 0.01:
                self._never_started += 1
            else:
                self._in_flight.append((task_id, agent, False))
            # "to" as node/services/tasks.py writes it (the catalogue makes it optional)
            data = {"id": task_id, "from": "bench", "to": agent, "input": {"n": i}}
            return NewEvent(agent, c.TASK_CREATED, data)
        task_id, owner, started = self._in_flight.popleft()
        if not started:
            self._in_flight.append((task_id, owner, True))
            return NewEvent(owner, c.TASK_STARTED, {"id": task_id})
        counts.tasks_completed += 1
        return NewEvent(owner, c.TASK_COMPLETED, {"id": task_id, "output": {"ok": True}})


def write_config(directory: Path, port: int = 0) -> Path:
    """runtime.toml next to `data/`: a name, the data dir, a port, an admin token, no agents."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "runtime.toml"
    path.write_text(
        f"""# written by bench/scale.py
[node]
name = "{NODE_NAME}"
listen = "127.0.0.1:{port or free_port()}"
data_dir = "data"
shutdown_drain_secs = 0.2

[[auth.tokens]]
name = "bench-admin"
token = "{TOKEN}"
scopes = ["admin"]
"""
    )
    return path


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def source_fingerprint(src: Path) -> str:
    """Of the code that decides what a data dir holds (a cached one may predate a change)."""
    digest = hashlib.sha256()
    for package in ("eventstore", "projections", "node"):
        for path in sorted((src / package).rglob("*.py")):
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


async def write_history(config_path: Path, n: int) -> tuple[Counts, float]:
    """N events through the store as the node opens it, BATCH per append_many, two in flight."""
    config = load_config(config_path)
    key = load_or_create_key(config.data_path)
    store = open_store(config, key)
    store.start()
    history = History()
    events = history.events(n)
    in_flight: deque[tuple[asyncio.Future[Any], int]] = deque()
    started = time.perf_counter()
    with tqdm(total=n, desc=f"build {n:,}", unit=" events", unit_scale=True, file=sys.stderr) as b:
        while batch := list(islice(events, BATCH)):
            in_flight.append((asyncio.ensure_future(store.append_many(batch)), len(batch)))
            if len(in_flight) > 1:
                future, count = in_flight.popleft()
                await future
                b.update(count)
        for future, count in in_flight:
            await future
            b.update(count)
    await store.close()
    return history.counts, time.perf_counter() - started


def build(directory: Path, n: int, rebuild: bool) -> dict[str, Any]:
    """The cached data dir of N events (built when missing, incomplete or `rebuild`)."""
    marker = directory / MARKER
    if marker.exists() and not rebuild:
        built = json.loads(marker.read_text())
        if built.get("events") == n:
            if built.get("source") != source_fingerprint(ROOT):
                print(
                    f"  note: {directory} was built by other code (source {built.get('source')});"
                    " the node folds what it needs at its first start, --rebuild to rebuild"
                )
            print(f"  reusing {directory} (built in {built['build_s']:.1f} s)")
            return built
    shutil.rmtree(directory, ignore_errors=True)
    config = write_config(directory)
    counts, seconds = asyncio.run(write_history(config, n))
    built = {
        "events": n,
        "counts": asdict(counts),
        "build_s": round(seconds, 1),
        "build_events_per_s": round(n / seconds),
        "source": source_fingerprint(ROOT),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    marker.write_text(json.dumps(built, indent=1))
    print(f"  built {n:,} events in {seconds:.1f} s ({n / seconds:,.0f}/s): {asdict(counts)}")
    return built


# ------------------------------------------------------------------------------ disk


def lmdb_usage(env_dir: Path) -> dict[str, Any]:
    """data.mdb's size and, per named database, the bytes its pages take."""
    env = lmdb.open(str(env_dir), readonly=True, lock=False, max_dbs=64)
    try:
        psize = env.stat()["psize"]
        with env.begin() as txn:
            names = [bytes(k) for k, _ in txn.cursor()]
        databases: dict[str, dict[str, int]] = {}
        for name in names:
            try:
                db = env.open_db(name, create=False)
            except lmdb.Error:  # a plain key of the main database, not a database
                continue
            with env.begin() as txn:
                s = txn.stat(db)
            pages = s["branch_pages"] + s["leaf_pages"] + s["overflow_pages"]
            databases[name.decode(errors="replace")] = {
                "bytes": psize * pages,
                "entries": s["entries"],
                "depth": s["depth"],
            }
        used = (env.info()["last_pgno"] + 1) * psize
    finally:
        env.close()
    return {
        "file_bytes": (env_dir / "data.mdb").stat().st_size,
        "used_bytes": used,
        "databases": databases,
    }


NOT_COUNTED = ("data.mdb", "lock.mdb", "writer.lock", "node.key")


def disk_usage(data_dir: Path, n: int, detail: bool = True) -> dict[str, Any]:
    """Bytes per event of each LMDB file and each of its non-empty databases, and of the other
    files of the data dir (the checkpoint); `detail` adds every database's figures."""
    envs = {
        str(p.parent.relative_to(data_dir)): lmdb_usage(p.parent)
        for p in sorted(data_dir.rglob("data.mdb"))
    }
    others = {
        str(p.relative_to(data_dir)): p.stat().st_size
        for p in sorted(data_dir.rglob("*"))
        if p.is_file() and p.name not in NOT_COUNTED
    }
    per_event = {f"{env}:data.mdb": round(u["file_bytes"] / n, 1) for env, u in envs.items()}
    per_event.update(
        {
            f"{env}:{db}": round(figures["bytes"] / n, 1)
            for env, usage in envs.items()
            for db, figures in usage["databases"].items()
            if figures["entries"]
        }
    )
    per_event.update({name: round(size / n, 1) for name, size in others.items()})
    out: dict[str, Any] = {"files": others, "bytes_per_event": per_event}
    if detail:
        out["envs"] = envs
    return out


# ------------------------------------------------------------------------------ the node


def copy_data(source: Path, target: Path) -> None:
    """`cp -a`, then fsync every file: otherwise the copy's dirty pages (the whole journal)
    are written back during the measurement, and the first commit's fdatasync waits for
    all of them."""
    subprocess.run(["cp", "-a", str(source), str(target)], check=True)
    for path in target.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def compact_copy(data_dir: Path) -> dict[str, Any]:
    """What `agent-node journal compact` does, on a copy (LMDB's compacting copy, renamed in)."""
    from eventstore.compaction import compact

    started = time.perf_counter()
    done = compact(data_dir / "journal")
    print(
        f"  compacted {data_dir}: {done.bytes_before:,} → {done.bytes_after:,} bytes, "
        f"{done.unused_pages_before:,} unused pages, {time.perf_counter() - started:.1f} s"
    )
    return {**asdict(done), "seconds": round(time.perf_counter() - started, 1)}


@dataclass
class Revision:
    name: str
    src: Path

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(self.src)
        env["AGENT_NODE_SRC"] = str(self.src)
        env["AGENT_NODE_SIGNER"] = "extension"  # fail loudly rather than sign slower
        return env


class NodeFailed(RuntimeError):
    pass


class Node:
    """`python -m node run` of one revision on one run dir (runtime.toml + data/)."""

    def __init__(self, revision: Revision, run_dir: Path, timeout: float) -> None:
        self.revision = revision
        self.run_dir = run_dir
        self.timeout = timeout
        self.config = run_dir / "runtime.toml"
        self.port = int(re.findall(r':(\d+)"', self.config.read_text())[0])
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = run_dir / "node.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_offset = 0

    def start(self) -> float:
        """Seconds from spawning the process to GET /api/v1/health answering ok."""
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = open(self.log_path, "ab")  # noqa: SIM115  (the child keeps it)
        started = time.perf_counter()
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "node", "run", "--config", str(self.config)],
            cwd=self.revision.src,
            env=self.revision.env(),
            stdout=log,
            stderr=log,
        )
        log.close()

        def healthy() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise NodeFailed(f"exited {self.proc.returncode}:\n{self.new_log()[-3000:]}")
            with NO_PROXY.open(f"{self.url}/api/v1/health", timeout=2) as r:
                return r.status == 200 and json.loads(r.read())["status"] == "ok"

        try:
            wait_until(healthy, self.timeout, "healthy", interval=0.02, retry_on=(OSError,))
        except DeadlineExceeded:
            self.kill()
            raise NodeFailed(
                f"not healthy after {self.timeout:.0f} s:\n{self.new_log()[-3000:]}"
            ) from None
        return time.perf_counter() - started

    def stop(self) -> float:
        """SIGTERM; seconds until the process exited (it saves its checkpoint on the way)."""
        assert self.proc is not None
        started = time.perf_counter()
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(self.timeout)
        if code != 0:
            raise NodeFailed(f"exit status {code} after SIGTERM:\n{self.new_log()[-3000:]}")
        self.proc = None
        return time.perf_counter() - started

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def anon_bytes(self) -> int:
        """Anonymous RSS: the heap and stacks, not the mapped journal nor shared libraries."""
        assert self.proc is not None
        text = Path(f"/proc/{self.proc.pid}/smaps_rollup").read_text()
        return int(re.search(r"^Anonymous:\s+(\d+) kB", text, re.M)[1]) * 1024  # type: ignore[index]

    def new_log(self) -> str:
        with open(self.log_path, "rb") as f:
            f.seek(self._log_offset)
            return f.read().decode(errors="replace")

    def start_notes(self) -> list[str]:
        """What the node said about its start-up (checkpoints, rebuilds, folds)."""
        return [line[-200:] for line in self.new_log().splitlines() if SHOWN_LOG.search(line)]


def auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}


async def last_seq(url: str, kind: str, total: int) -> int | None:
    """The seq of the newest entry the node shows when asked past `total - 1` (None: it shows
    fewer than `total`); `total` when it holds exactly what was written."""
    async with (
        aiohttp.ClientSession(headers=auth()) as session,
        session.get(f"{url}/api/v1/{kind}?since={max(total - 1, 0)}&limit=100") as r,
    ):
        entries = (await r.json())[kind]
    return int(entries[-1]["seq"]) if entries else None


async def serve_pages(url: str, totals: dict[str, int], requests: int) -> dict[str, Any]:
    """p50/p99 of `requests` sequential GETs per (kind, since), one keep-alive session, after
    one uncounted first GET (reported alone: its pages may still be on disk, not in memory)."""
    out: dict[str, Any] = {}
    async with aiohttp.ClientSession(headers=auth()) as session:
        for kind, total in totals.items():
            for where, since in (("start", 0), ("middle", total // 2), ("end", total - 100)):
                since = max(since, 0)
                page = f"{url}/api/v1/{kind}?since={since}&limit=100"
                started = time.perf_counter()
                async with session.get(page) as r:
                    if r.status != 200:
                        raise NodeFailed(f"GET {page}: {r.status} {await r.text()}")
                    entries = len((await r.json())[kind])
                first = time.perf_counter() - started  # cold: its pages may come from disk
                latencies = []
                for _ in range(requests):
                    started = time.perf_counter()
                    async with session.get(page) as r:
                        await r.read()
                        if r.status != 200:
                            raise NodeFailed(f"GET {page}: {r.status}")
                    latencies.append(time.perf_counter() - started)
                out[f"{kind}_{where}"] = {
                    "since": since,
                    "entries": entries,
                    "first_ms": round(first * 1000, 2),
                    "p50_ms": round(percentile(latencies, 0.5) * 1000, 2),
                    "p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
                }
    return out


async def post_findings(url: str, count: int) -> None:
    """Findings no checkpoint holds yet: the kill -9 restart has to recover them."""
    if count:
        body = lambda i: {"agent": AGENTS[i % 100], "severity": "low", "title": f"unsaved {i}"}  # noqa: E731
        result = await http_load(
            f"{url}/api/v1/findings", concurrency=16, requests=count, body=body, headers=auth()
        )
        if result["failures"]:
            raise NodeFailed(f"{result['failures']} of {count} POST /api/v1/findings failed")


def measure_node(
    revision: Revision, built_dir: Path, run_dir: Path, built: dict[str, Any], args: Any
) -> dict[str, Any]:
    """Every figure of one revision on its own copy of the built data dir."""
    n = built["events"]
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    copy_data(built_dir / "data", run_dir / "data")
    write_config(run_dir)
    node = Node(revision, run_dir, timeout=120 + n / 5000)
    label = f"[{n:,} {revision.name}]"
    totals = {"logs": built["counts"]["logs"], "findings": built["counts"]["findings"]}
    out: dict[str, Any] = {"run_dir": str(run_dir)}
    warnings: list[str] = []
    try:
        out["first_start_s"] = round(node.start(), 2)
        out["first_start_log"] = node.start_notes()
        out["first_stop_s"] = round(node.stop(), 2)
        print(
            f"  {label} first start (copy without checkpoint) {out['first_start_s']:.2f} s,"
            f" stop {out['first_stop_s']:.2f} s"
        )
        clean, killed, stops = [], [], []
        for i in range(args.rounds):
            clean.append(node.start())
            if i == 0:
                out["clean_start_log"] = node.start_notes()
                out["heap_healthy_mb"] = round(node.anon_bytes() / 2**20, 1)
                shown = asyncio.run(last_seq(node.url, "logs", totals["logs"]))
                if shown != totals["logs"]:
                    warnings.append(f"the node shows logs up to {shown}, wrote {totals['logs']}")
                out["pages"] = asyncio.run(serve_pages(node.url, totals, args.requests))
                out["heap_after_pages_mb"] = round(node.anon_bytes() / 2**20, 1)
            asyncio.run(post_findings(node.url, args.unsaved))
            totals["findings"] += args.unsaved
            node.kill()
            killed.append(node.start())
            if i == 0:
                out["kill_start_log"] = node.start_notes()
                out["heap_after_kill_mb"] = round(node.anon_bytes() / 2**20, 1)
            shown = asyncio.run(last_seq(node.url, "findings", totals["findings"]))
            if shown != totals["findings"]:
                warnings.append(
                    f"after kill -9 the node shows findings up to {shown}, "
                    f"wrote {totals['findings']}"
                )
            stops.append(node.stop())
            print(
                f"  {label} round {i + 1}: start after SIGTERM {clean[-1]:.2f} s,"
                f" after kill -9 {killed[-1]:.2f} s, stop {stops[-1]:.2f} s"
            )
        out["clean_start_s"] = round(median(clean), 2)
        out["kill_start_s"] = round(median(killed), 2)
        out["stop_s"] = round(median(stops), 2)
        out["clean_start_rounds"] = [round(s, 2) for s in clean]
        out["kill_start_rounds"] = [round(s, 2) for s in killed]
    except Exception as exc:  # a revision in the middle of a change: report it, go on
        out["error"] = f"{type(exc).__name__}: {exc}"[-2000:]
        print(f"  {label} FAILED: {out['error'][-600:]}")
    finally:
        node.kill()
    if warnings:
        out["warnings"] = warnings
        print(f"  {label} WARNING: " + "; ".join(warnings))
    out["disk"] = disk_usage(run_dir / "data", n, detail=False)
    return out


# ------------------------------------------------------------------------------ appends


async def append_rate(
    config_path: Path, producers: int, streams: int, seconds: float
) -> dict[str, Any]:
    """64 producers, each awaiting its own durable append of a log event in a loop, over
    `streams` journals (8 as in bench/journal.py: each commit then dirties few pages); the
    rate over `seconds` after half a second of warm-up.

    The store and the projections are the node's own: `build_app` opens the journal with
    `node.app.open_store` (with whatever read models it carries) and sets up every in-memory
    projection for it, which fold each commit from empty, as in (a) of bench/journal.py. Not
    `Projections.fresh()`: it may bring scratch copies of on-disk models the node never folds.
    """
    config = load_config(config_path)
    ctx = build_app(config, key=load_or_create_key(config.data_path))[CONTEXT]
    store, projections = ctx.store, ctx.projections
    projections.rebuild(())  # as bench/journal.py: collector state frozen after set-up
    store.add_commit_listener(projections.apply)
    store.start()
    before = store.last_position
    done = 0
    running = True
    data = {"level": "info", "message": "request 000000000 served in  12 ms from cache shard 07 ok"}

    async def producer(n: int) -> None:
        nonlocal done
        stream = AGENTS[n % streams]
        while running:
            await store.append(stream, c.LOG, data)
            done += 1

    tasks = [asyncio.ensure_future(producer(n)) for n in range(producers)]
    await asyncio.sleep(0.5)
    first, started, cpu = done, time.perf_counter(), process_cpu()
    await asyncio.sleep(seconds)
    last, elapsed, cpu = done, time.perf_counter() - started, process_cpu() - cpu
    running = False
    await asyncio.gather(*tasks)
    after = store.last_position
    await store.close()
    return {
        "appends_per_s": round((last - first) / elapsed),
        "cpu_us_per_append": round(cpu / max(last - first, 1) * 1e6, 1),
        "events_before": before,
        "events_after": after,
    }


def process_cpu() -> float:
    """CPU seconds of this process, every thread (the writer, its signing helper, the loop):
    what an append costs whatever else the shared machine runs."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def appends_child(revision: Revision, config: Path, args: Any) -> dict[str, Any]:
    result = subprocess.run(
        [
            PYTHON,
            str(Path(__file__).resolve()),
            "--appends-child",
            str(config),
            "--producers",
            str(args.producers),
            "--append-streams",
            str(args.append_streams),
            "--append-seconds",
            str(args.append_seconds),
        ],
        cwd=revision.src,
        env=revision.env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if result.returncode != 0:
        raise NodeFailed(result.stderr[-2000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


COPY_UP_TO = 1_000_000  # events: larger journals are appended to in place (< 1 % per round)


@contextlib.contextmanager
def journal_copy(run_dir: Path | None, n: int, scratch: Path) -> Iterator[Path]:
    """The config of an empty journal (run_dir None), or of a fresh copy of the revision's
    run dir (which its node brought up to date), or of the run dir itself when it is large."""
    if run_dir is not None and n > COPY_UP_TO:
        yield write_config(run_dir)  # a fresh port; no node runs on it now
        return
    directory = Path(tempfile.mkdtemp(prefix="scale-appends-", dir=scratch))
    try:
        if run_dir is not None:
            copy_data(run_dir / "data", directory / "data")
        yield write_config(directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def measure_appends(revision: Revision, run_dir: Path, n: int, args: Any) -> dict[str, Any]:
    """Empty journal vs the large one, rounds alternating which goes first; median ratio."""
    pairs = []
    for i in range(args.append_rounds):
        rates = {}
        for which in ("large", "empty") if i % 2 else ("empty", "large"):
            source = run_dir if which == "large" else None
            with journal_copy(source, n, args.root) as config:
                rates[which] = appends_child(revision, config, args)
        e, g = rates["empty"], rates["large"]
        pairs.append((e, g))
        print(
            f"  [appends {revision.name}] round {i + 1}: empty {e['appends_per_s']:,}/s, "
            f"{g['events_before']:,} events {g['appends_per_s']:,}/s: "
            f"{g['appends_per_s'] / e['appends_per_s']:.2f}; CPU µs per append "
            f"{e.get('cpu_us_per_append')} / {g.get('cpu_us_per_append')}"
        )
    pairs.sort(key=lambda p: p[1]["appends_per_s"] / p[0]["appends_per_s"])
    empty_rate, large_rate = pairs[len(pairs) // 2]
    return {
        "events": n,
        "producers": args.producers,
        "streams": args.append_streams,
        "empty_per_s": empty_rate["appends_per_s"],
        "large_per_s": large_rate["appends_per_s"],
        "ratio": round(large_rate["appends_per_s"] / empty_rate["appends_per_s"], 2),
        "ratio_rounds": [round(g["appends_per_s"] / e["appends_per_s"], 2) for e, g in pairs],
        # load-independent: CPU per append, empty ÷ large (1.0: history costs no CPU)
        "cpu_ratio": round(
            median(
                e["cpu_us_per_append"] / g["cpu_us_per_append"]
                for e, g in pairs
                if g.get("cpu_us_per_append")
            ),
            2,
        )
        if all("cpu_us_per_append" in g for _, g in pairs)
        else None,
        "cpu_us_per_append": {
            "empty": median(e.get("cpu_us_per_append", 0) for e, _ in pairs),
            "large": median(g.get("cpu_us_per_append", 0) for _, g in pairs),
        },
        "large_events_before": large_rate["events_before"],
        "target": 0.9,
    }


# ------------------------------------------------------------------------------ main


def base_revision(commit: str, src: Path) -> Revision:
    """A detached worktree of `commit`, with the working tree's compiled signer copied in
    (built from the same sign_batch.c: checked)."""
    if not (src / ".git").exists():
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(src), commit],
            check=True,
            capture_output=True,
        )
    for so in (ROOT / "eventstore").glob("_sign_batch*.so"):
        ours, theirs = ROOT / "eventstore/sign_batch.c", src / "eventstore/sign_batch.c"
        if ours.read_bytes() != theirs.read_bytes():
            raise SystemExit(f"{theirs} differs from {ours}: build the base's signer first")
        if not (src / "eventstore" / so.name).exists():
            shutil.copy2(so, src / "eventstore" / so.name)
    return Revision("base", src)


def last_line(text: str) -> str:
    """A traceback's last line: the exception."""
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1][:160] if lines else ""


def ratio(new: Any, base: Any) -> float | None:
    if isinstance(new, int | float) and isinstance(base, int | float) and base:
        return round(new / base, 2)
    return None


def print_table(n: int, results: dict[str, dict[str, Any]]) -> None:
    rows = [
        ("first start, no checkpoint (s)", "first_start_s"),
        ("start after SIGTERM (s)", "clean_start_s"),
        ("start after kill -9 (s)", "kill_start_s"),
        ("stop, SIGTERM to exit (s)", "stop_s"),
        ("heap once healthy (MiB)", "heap_healthy_mb"),
        ("heap after pages (MiB)", "heap_after_pages_mb"),
    ]
    page_keys = [f"{k}_{w}" for k in ("logs", "findings") for w in ("start", "middle", "end")]
    print(f"\n{n:,} events{'':23s}{'new':>12s}{'base':>12s}{'new/base':>10s}")

    def line(label: str, a: Any, b: Any) -> None:
        r = ratio(a, b)
        show = lambda v: f"{v:>12,.2f}" if isinstance(v, int | float) else f"{'-':>12s}"  # noqa: E731
        print(f"  {label:32s}{show(a)}{show(b)}{(f'{r:.2f}' if r else '-'):>10s}")

    new, base = results.get("new", {}), results.get("base", {})
    for label, key in rows:
        line(label, new.get(key), base.get(key))
    for key in page_keys:
        a = new.get("pages", {}).get(key, {})
        b = base.get("pages", {}).get(key, {})
        line(f"{key} p50 (ms)", a.get("p50_ms"), b.get("p50_ms"))
        line(f"{key} p99 (ms)", a.get("p99_ms"), b.get("p99_ms"))
    for name, figures in (("new", new), ("base", base)):
        if "skipped" in figures:
            print(f"  base: {figures['skipped']}")
        if "error" in figures:
            print(f"  {name}: FAILED ({last_line(figures['error'])})")
        if "disk" in figures:
            per = figures["disk"]["bytes_per_event"]
            print(f"  {name} disk bytes/event: " + ", ".join(f"{k} {v}" for k, v in per.items()))


def summary(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    new, base = results.get("new", {}), results.get("base", {})
    keys = [
        "first_start_s",
        "clean_start_s",
        "kill_start_s",
        "heap_healthy_mb",
        "heap_after_pages_mb",
    ]
    out = {k: ratio(new.get(k), base.get(k)) for k in keys}
    for key in new.get("pages", {}):
        out[f"{key}_p99"] = ratio(
            new["pages"][key]["p99_ms"], base.get("pages", {}).get(key, {}).get("p99_ms")
        )
    return {k: v for k, v in out.items() if v is not None}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--root", type=Path, default=Path("/tmp/agent-node-scale"))
    parser.add_argument("--rebuild", action="store_true", help="rebuild cached data dirs")
    parser.add_argument("--quick", action="store_true", help="100k only, fewer requests")
    parser.add_argument("--revisions", default="new,base")
    parser.add_argument("--base-commit", default="44c8a17")
    parser.add_argument("--base-src", type=Path, help="its worktree (default ROOT/src-COMMIT)")
    parser.add_argument("--base-max", type=int, default=1_000_000, help="largest N for base")
    parser.add_argument("--requests", type=int, default=300, help="per page and position")
    parser.add_argument("--rounds", type=int, default=3, help="restart rounds")
    parser.add_argument("--unsaved", type=int, default=1000, help="findings POSTed before kill")
    parser.add_argument("--producers", type=int, default=64)
    parser.add_argument("--append-seconds", type=float, default=5.0)
    parser.add_argument("--append-rounds", type=int, default=5)
    parser.add_argument("--append-streams", type=int, default=8, help="journals appended to")
    parser.add_argument("--keep", action="store_true", help="keep the revisions' copies")
    parser.add_argument(
        "--appends-only",
        action="store_true",
        help="only the appends/s ratio, on a fresh copy of the largest build (no node runs)",
    )
    parser.add_argument(
        "--compact",
        action="store_true",
        help="compact that copy first (agent-node journal compact): no free pages left by "
        "the bulk build, as a journal grown by appends or restored from `mdb_copy -c`",
    )
    parser.add_argument("--appends-child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.appends_child:
        rate = append_rate(
            args.appends_child, args.producers, args.append_streams, args.append_seconds
        )
        report(asyncio.run(rate))
        return
    if args.quick:
        args.sizes, args.requests, args.rounds, args.append_seconds = "100000", 100, 1, 3.0
        args.append_rounds = 1
    sizes = sorted(int(s.replace("_", "")) for s in args.sizes.split(","))
    args.root.mkdir(parents=True, exist_ok=True)
    wanted = args.revisions.split(",")
    revisions = []
    if "new" in wanted:
        revisions.append(Revision("new", ROOT))
    if "base" in wanted:
        src = args.base_src or args.root / f"src-{args.base_commit}"
        revisions.append(base_revision(args.base_commit, src))
    figures: dict[str, Any] = {
        "bench": "scale",
        "base_commit": args.base_commit,
        "quick": args.quick,
        "requests": args.requests,
        "rounds": args.rounds,
        "unsaved": args.unsaved,
        "append_rounds": args.append_rounds,
        "append_seconds": args.append_seconds,
        "appends_only": args.appends_only,
        "compact": args.compact,
        "sizes": {},
    }
    largest: dict[str, tuple[int, Path]] = {}
    if args.appends_only:
        n = sizes[-1]
        build(args.root / str(n), n, args.rebuild)
        for revision in revisions:
            run_dir = args.root / str(n) / f"run-{revision.name}"
            shutil.rmtree(run_dir, ignore_errors=True)
            run_dir.mkdir()
            copy_data(args.root / str(n) / "data", run_dir / "data")
            if args.compact:
                figures[f"compacted_{revision.name}"] = compact_copy(run_dir / "data")
            largest[revision.name] = (n, run_dir)
        sizes_measured: list[int] = []
    else:
        sizes_measured = sizes
    for index, n in enumerate(sizes_measured):
        print(f"== {n:,} events")
        built_dir = args.root / str(n)
        built = build(built_dir, n, args.rebuild)
        entry: dict[str, Any] = {
            "build": built,
            "disk": disk_usage(built_dir / "data", n),
        }
        results: dict[str, dict[str, Any]] = {}
        order = revisions if index % 2 == 0 else revisions[::-1]  # alternate who goes first
        for revision in order:
            if revision.name == "base" and n > args.base_max:
                results["base"] = {"skipped": f"not run at {n:,} events (--base-max)"}
                print(f"  [{n:,} base] skipped: it keeps every read model in memory")
                continue
            run_dir = built_dir / f"run-{revision.name}"
            results[revision.name] = measure_node(revision, built_dir, run_dir, built, args)
            if "error" not in results[revision.name]:
                largest[revision.name] = (n, run_dir)
        entry.update(results)
        entry["new_over_base"] = summary(results)
        figures["sizes"][str(n)] = entry
        print_table(n, results)
    figures["appends"] = {}
    for revision in revisions:
        if revision.name not in largest:
            continue
        n, run_dir = largest[revision.name]
        try:
            figures["appends"][revision.name] = measure_appends(revision, run_dir, n, args)
        except Exception as exc:  # as in measure_node: report it, go on
            figures["appends"][revision.name] = {"error": f"{type(exc).__name__}: {exc}"[-2000:]}
            print(f"  [appends {revision.name}] FAILED: {str(exc)[-600:]}")
    for name, a in figures["appends"].items():
        if "ratio" in a:
            print(
                f"appends/s {name}, {a['producers']} producers on {a['streams']} journals: "
                f"empty {a['empty_per_s']:,}, "
                f"{a['events']:,} events {a['large_per_s']:,}: {a['ratio']:.2f} "
                f"(target {a['target']}) rounds {a['ratio_rounds']}"
            )
    figures["load_average"] = [round(x, 1) for x in os.getloadavg()]
    if not args.keep:
        for n in sizes:
            for revision in revisions:
                shutil.rmtree(args.root / str(n) / f"run-{revision.name}", ignore_errors=True)
    report(figures)


if __name__ == "__main__":
    main()
