"""Durable appends on a large journal against an empty one, with and without the on-disk read
models: does the rate drop with history because of the read models, or because of the journal?

Each round measures, in one process, 64 producers appending log events over 8 journals for a
few seconds: on a new empty journal and on the given (large) one, alternating which goes first
(the first of a pair is disadvantaged), once with the read models the node attaches
(`projections.models.disk_models`) and once with a bare `EventStore` (`--variants`). It appends
to the journal it is given: point it at a copy (bench/scale.py's builds are under
/tmp/agent-node-scale/<N>/data).

`--warm N` first appends N events to the large journal, untimed: a journal just built in bulk
(or after a large import) reuses the free pages its last large commits left, which scatters the
writes of its next ~200 commits (bench/commit_io.py); warming measures the steady state a
journal grown by real appends is in.

Run: .venv/bin/python bench/appends_depth.py COPY_OF_DATA_DIR [--rounds 3] [--seconds 4]
     [--warm 0] [--variants read_models,bare_journal]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from eventstore.keys import load_or_create_key
from eventstore.store import EventStore
from node.app import JOURNAL_DIR
from projections.models import disk_models

DATA = {"level": "info", "message": "request 000000000 served in  12 ms from cache shard 07 ok"}
VARIANTS = ("read_models", "bare_journal")


def open_store(data_dir: Path, read_models: bool) -> EventStore:
    return EventStore(
        data_dir / JOURNAL_DIR,
        load_or_create_key(data_dir),
        "bench",
        indexer=disk_models() if read_models else None,
    )


async def rate(data_dir: Path, read_models: bool, seconds: float) -> float:
    store = open_store(data_dir, read_models)
    store.start()
    done, running = 0, True

    async def producer(n: int) -> None:
        nonlocal done
        while running:
            await store.append(f"agent-{n % 8:03d}", "log", DATA)
            done += 1

    tasks = [asyncio.ensure_future(producer(n)) for n in range(64)]
    await asyncio.sleep(0.5)
    first, started = done, time.perf_counter()
    await asyncio.sleep(seconds)
    per_s = (done - first) / (time.perf_counter() - started)
    running = False
    await asyncio.gather(*tasks)
    await store.close()
    return per_s


async def warm(data_dir: Path, count: int) -> None:
    """`count` untimed appends by the same 64 producers (with the read models: they are in the
    same environment and their pages are freed and reused like the journal's)."""
    store = open_store(data_dir, True)
    store.start()

    async def producer(n: int) -> None:
        for _ in range(count // 64):
            await store.append(f"agent-{n % 8:03d}", "log", DATA)

    await asyncio.gather(*(producer(n) for n in range(64)))
    await store.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--warm", type=int, default=0, help="untimed appends to the large first")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    if unknown := set(variants) - set(VARIANTS):
        parser.error(f"unknown variants {sorted(unknown)}")
    if args.warm:
        started = time.perf_counter()
        asyncio.run(warm(args.data_dir, args.warm))
        print(f"warmed with {args.warm:,} appends in {time.perf_counter() - started:.1f} s")
    ratios: dict[str, list[float]] = {name: [] for name in variants}
    for i in range(args.rounds):
        for name in variants:
            with_models = name == "read_models"
            rates: dict[str, float] = {}
            for which in ("large", "empty") if i % 2 else ("empty", "large"):
                if which == "large":
                    rates[which] = asyncio.run(rate(args.data_dir, with_models, args.seconds))
                    continue
                empty_dir = Path(tempfile.mkdtemp(prefix="bench-empty-"))
                try:
                    rates[which] = asyncio.run(rate(empty_dir, with_models, args.seconds))
                finally:
                    shutil.rmtree(empty_dir, ignore_errors=True)
            empty, large = rates["empty"], rates["large"]
            ratios[name].append(large / empty)
            print(
                f"round {i + 1} {name}: empty {empty:,.0f}/s, large {large:,.0f}/s, "
                f"ratio {large / empty:.2f}",
                flush=True,
            )
    out: dict[str, object] = {
        "bench": "appends_depth",
        "data_dir": str(args.data_dir),
        "warm": args.warm,
        "seconds": args.seconds,
        "load_average": round(os.getloadavg()[0], 1),
    }
    for name, values in ratios.items():
        out[name] = {
            "ratio": round(statistics.median(values), 2),
            "ratios": sorted(round(v, 2) for v in values),
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
