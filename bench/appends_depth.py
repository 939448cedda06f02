"""Durable appends on a large journal against an empty one, with and without the on-disk read
models: does the rate drop with history because of the read models, or because of the journal?

Each round measures, in one process, 64 producers appending log events over 8 journals for a
few seconds: on a new empty journal, then on the given (large) one, once with the read models
the node attaches (`projections.models.disk_models`) and once with a bare `EventStore`. It
appends to the journal it is given: point it at a copy (bench/scale.py's builds are under
/tmp/agent-node-scale/<N>/data).

Run: .venv/bin/python bench/appends_depth.py COPY_OF_DATA_DIR [--rounds 3] [--seconds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
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


async def rate(data_dir: Path, read_models: bool, seconds: float) -> float:
    store = EventStore(
        data_dir / JOURNAL_DIR,
        load_or_create_key(data_dir),
        "bench",
        indexer=disk_models() if read_models else None,
    )
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args()
    ratios: dict[str, list[float]] = {"read_models": [], "bare_journal": []}
    for i in range(args.rounds):
        for name in ratios:
            with_models = name == "read_models"
            empty = asyncio.run(
                rate(Path(tempfile.mkdtemp(prefix="bench-empty-")), with_models, args.seconds)
            )
            large = asyncio.run(rate(args.data_dir, with_models, args.seconds))
            ratios[name].append(large / empty)
            print(
                f"round {i + 1} {name}: empty {empty:,.0f}/s, large {large:,.0f}/s, "
                f"ratio {large / empty:.2f}",
                flush=True,
            )
    out = {"bench": "appends_depth", "data_dir": str(args.data_dir)}
    for name, values in ratios.items():
        out[name] = {
            "ratio": round(statistics.median(values), 2),
            "ratios": sorted(round(v, 2) for v in values),
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
