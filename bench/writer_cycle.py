"""Where one group-commit cycle's time goes, under the load of bench/journal.py (a).

A cycle runs from the writer taking a batch to it taking the next one:
  stage      the writer builds the batch's envelopes (the helper thread signs meanwhile)
  finish     both threads sign what is left
  commit     rows written, LMDB commit with its two fsyncs
  wake       until the event loop runs the commit's listeners
  fold       the read models fold the batch
  release    the loop resumes the callers, who queue their next appends
  handoff    until the writer holds the GIL and takes the next batch
  zeros      zeros written ahead of the last page, after the commit (in `release`'s time)

It wraps private parts of `EventStore` (its signer and batch writer), because those are what it
measures: a rename there breaks it. Times are medians over the run's cycles, in microseconds;
means and 99th percentiles show the tails a busy host adds.

Run: .venv/bin/python bench/writer_cycle.py [--events 30000] [--producers 64]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import report
from bench.journal import DATA, KEY, node_projections
from eventstore.store import EventStore

PHASES = ("stage", "finish", "commit", "wake", "fold", "release", "handoff")


class _TimedSigner:
    """The store's signer, noting when a batch opens and when its signing is done."""

    def __init__(self, signer, marks: dict[str, float]) -> None:
        self._signer, self._marks = signer, marks
        self.add = signer.add

    def begin(self, *args, **kwargs):
        return self._signer.begin(*args, **kwargs)

    def finish(self):
        self._marks["finish"] = time.perf_counter()
        signatures = self._signer.finish()
        self._marks["commit"] = time.perf_counter()
        return signatures

    def close(self) -> None:
        self._signer.close()


async def measure(directory: Path, events: int, producers: int) -> tuple[float, list[dict]]:
    store = EventStore(directory, KEY, "bench")
    projections = node_projections()
    projections.rebuild(())
    cycles: list[dict[str, float]] = []
    marks: dict[str, float] = {}
    loop = asyncio.get_running_loop()

    def note(name: str) -> None:
        marks[name] = time.perf_counter()

    def on_commit(_envelopes) -> None:
        note("fold")
        # behind the callers' wake-ups, which the store schedules after its listeners ran
        loop.call_soon(loop.call_soon, note, "handoff")

    store.add_commit_listener(on_commit)
    store.add_commit_listener(projections.apply)
    store.add_commit_listener(lambda _envelopes: note("release"))
    writer = store._writer  # eventstore/writer.py: the thread and its transaction
    writer._signer = _TimedSigner(writer._signer, marks)
    write_batch, commit, keep_zeros = writer._write_batch, writer._commit, writer._zeros.keep

    def timed_write_batch(batch):
        envelopes = write_batch(batch)
        note("wake")
        return envelopes

    def timed_commit(batch):
        now = time.perf_counter()
        if "handoff" in marks:
            cycles.append({**marks, "next": now, "size": len(batch)})
        marks.clear()
        marks["stage"] = now
        commit(batch)

    def timed_zeros():
        started = time.perf_counter()
        keep_zeros()
        marks["zeros_us"] = (time.perf_counter() - started) * 1e6

    writer._write_batch, writer._commit, writer._zeros.keep = (
        timed_write_batch,
        timed_commit,
        timed_zeros,
    )
    store.start()
    per_producer = events // producers

    async def producer(n: int) -> None:
        for _ in range(per_producer):
            await store.append(f"agent{n % 8}", "finding", DATA)

    started = time.perf_counter()
    await asyncio.gather(*(producer(n) for n in range(producers)))
    rate = per_producer * producers / (time.perf_counter() - started)
    await store.close()
    return rate, cycles


def phase_times(cycle: dict[str, float]) -> dict[str, float]:
    """Each phase's length in µs: from its own mark to the next phase's."""
    ends = [*PHASES[1:], "next"]
    times = {p: (cycle[end] - cycle[p]) * 1e6 for p, end in zip(PHASES, ends, strict=True)}
    times["cycle"] = (cycle["next"] - cycle["stage"]) * 1e6
    times["zeros"] = cycle.get("zeros_us", 0.0)
    return times


def _ordered(cycle: dict[str, float]) -> bool:
    """False when the writer took a batch before the loop's turn ended (its marks overlap)."""
    times = [cycle[p] for p in (*PHASES, "next")]
    return times == sorted(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=30_000)
    parser.add_argument("--producers", type=int, default=64)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-cycle-"))
    try:
        rate, cycles = asyncio.run(measure(tmp / "store", args.events, args.producers))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    in_order = [c for c in cycles if all(p in c for p in PHASES) and _ordered(c)]
    steady = [phase_times(c) for c in in_order[5:-5]]
    figures: dict[str, object] = {"bench": "writer_cycle", "appends_per_s": round(rate)}
    print(f"{len(steady)} cycles, {rate:,.0f} appends/s; µs per cycle phase:")
    print(f"{'':10} {'median':>8} {'mean':>8} {'p99':>8}")
    for name in [*PHASES, "zeros", "cycle"]:
        values = [t[name] for t in steady]
        median, mean = statistics.median(values), statistics.fmean(values)
        p99 = statistics.quantiles(values, n=100)[98]
        print(f"{name:10} {median:8.0f} {mean:8.0f} {p99:8.0f}")
        figures[f"{name}_median_us"] = round(median)
        figures[f"{name}_mean_us"] = round(mean)
    figures["batch_median"] = statistics.median(c["size"] for c in cycles)
    report(figures)


if __name__ == "__main__":
    main()
