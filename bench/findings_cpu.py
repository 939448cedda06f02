"""CPU time per POST /api/v1/findings, by thread: where a request's cost goes.

A node (this tree, or `--tree DIR` for another checkout) runs on CPU 0 as perf-guard runs it,
loaded by wrk on CPU 1 for `--seconds`; the kernel's per-thread CPU counters are read before
and after. The event loop's thread and the journal's writer are reported apart (the node is
CPU-bound on its one core, so requests/s is about 1e6 / total µs). Counters, unlike rates,
hardly drift with the machine's other tenants, so two trees can be compared run by run. For the
split inside a thread, run py-spy on the node under the same load (bench/HISTORY.md, "The write
path, per request").

The bare aiohttp peer (bench/bare_server.py, perf-guard's) is measured the same way in every
round, so `cpu_ratio_to_bare` (its CPU per request ÷ the node's) is perf-guard's ratio as the
node's cost sees it: unlike requests/s, it does not fall when another tenant's disk traffic
slows the node's fsyncs. `--base COMMIT` adds that commit's tree to every round (alternating
which runs first), for an A/B.

Run: .venv/bin/python bench/findings_cpu.py [--tree DIR] [--base COMMIT] [--seconds 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    export,
    report,
    start_process,
    stop_process,
)
from bench.journal import FINDING  # noqa: E402
from bench.wrk import SERVER_CPU, pinned, post_rate  # noqa: E402
from harness.node import ADMIN_TOKEN, free_port, write_config  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_by_thread(pid: int) -> dict[int, int]:
    """utime + stime in clock ticks of every thread of `pid`."""
    ticks = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        ticks[int(task.name)] = int(fields[11]) + int(fields[12])
    return ticks


def one_round(tree: Path | None, seconds: int) -> dict[str, float]:
    """One loaded window of the node of `tree`, or of the bare peer (tree None)."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="findings-cpu-") as tmp:
        config = write_config(Path(tmp), port=port)
        server = (
            [str(ROOT / "bench" / "bare_server.py"), str(port)]
            if tree is None
            else ["-m", "node", "run", "--config", str(config)]
        )
        proc = start_process(
            [*pinned(SERVER_CPU), sys.executable, *server],
            f"http://127.0.0.1:{port}/api/v1/health",
            cwd=tree or ROOT,
        )
        try:
            url = f"http://127.0.0.1:{port}/api/v1/findings"
            headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
            post_rate(url, FINDING, headers, seconds=2)  # warm-up
            before = cpu_by_thread(proc.pid)
            rate = post_rate(url, FINDING, headers, seconds=seconds)["requests_per_s"]
            after = cpu_by_thread(proc.pid)
        finally:
            stop_process(proc)
    requests = rate * seconds
    used = {tid: (after[tid] - before.get(tid, 0)) / TICKS / requests * 1e6 for tid in after}
    loop = used.pop(proc.pid)
    others = sorted(used.values(), reverse=True)
    return {
        "requests_per_s": rate,
        "loop_us": loop,
        "writer_us": others[0] if others else 0.0,  # the busiest other thread: the writer
        "other_us": sum(others[1:]),
        "total_us": loop + sum(others),
    }


def medians(rounds: list[dict[str, float]]) -> dict[str, float]:
    return {k: round(statistics.median(r[k] for r in rounds), 1) for k in rounds[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=ROOT)
    parser.add_argument("--base", help="a commit to measure alongside, from its own worktree")
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="findings-cpu-trees-"))
    try:
        trees: dict[str, Path | None] = {"this": args.tree, "bare": None}
        if args.base:
            trees["base"] = export(args.base, tmp)
        rounds: dict[str, list[dict[str, float]]] = {label: [] for label in trees}
        for r in range(args.rounds):
            order = list(trees) if r % 2 == 0 else list(reversed(trees))
            for label in order:
                rounds[label].append(one_round(trees[label], args.seconds))
                figures = ", ".join(f"{k} {v:,.1f}" for k, v in rounds[label][-1].items())
                print(f"round {r + 1} {label}: {figures}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result: dict[str, object] = {"bench": "findings_cpu", "tree": str(args.tree)}
    bare_us = medians(rounds["bare"])["total_us"]
    for label in trees:
        if label == "bare":
            continue
        figures = medians(rounds[label])
        suffix = "" if label == "this" else "_base"
        result.update({k + suffix: v for k, v in figures.items()})
        result["cpu_ratio_to_bare" + suffix] = round(bare_us / figures["total_us"], 3)
    result["bare_total_us"] = bare_us
    if args.base:
        result["base"] = args.base
        result["this_vs_base"] = round(result["total_us_base"] / result["total_us"], 3)  # type: ignore[operator]
    report(result)


if __name__ == "__main__":
    main()
