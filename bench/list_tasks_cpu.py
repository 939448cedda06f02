"""ListTasks CPU per call ÷ the REST tasks page's, in one run (issue 55 item 9).

One node whose agent (a tiny component that never runs a task) holds `--tasks` pending tasks
of about 1 KB of input each. The node process's CPU time (utime + stime, /proc: counters drift
far less than wall-clock times on a shared machine) is read around batches of `--batch` calls,
alternating: A2A `ListTasks` (POST /a2a/worker, `pageSize` `--page`, 50) and the REST page (GET
/api/v1/a2a/tasks?agent=worker&limit=50), one call at a time on a keep-alive connection. The
figures are CPU ms per call (the median over the batches) and their ratio. With `--base REV`
the same is measured on that revision's tree in the same run (the ratio before).

Run: .venv/bin/python bench/list_tasks_cpu.py [--tasks 1000] [--batches 10] [--batch 20]
     [--base REV]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench.common import export, report, start_process, stop_process  # noqa: E402
from bench.proc_cpu import process_seconds  # noqa: E402
from harness.node import ADMIN_TOKEN, free_port, tiny_component, write_config  # noqa: E402

AGENT = """
[[agents]]
name = "worker"
component = "{component}"
tick_interval_ms = 600000
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--page", type=int, default=50, help="tasks a call lists")
    parser.add_argument("--base", help="also measure this revision's tree (before)")
    args = parser.parse_args()
    figures: dict[str, object] = {"bench": "list_tasks_cpu", "tasks": args.tasks, "page": args.page}
    with tempfile.TemporaryDirectory(prefix="list-tasks-") as tmp:
        trees = [("", ROOT)]
        if args.base:
            trees.append(("base_", export(args.base, Path(tmp))))
        for prefix, tree in trees:
            figures.update(
                {f"{prefix}{k}": v for k, v in measure_tree(tree, Path(tmp), prefix, args).items()}
            )
    report(figures)


def measure_tree(tree: Path, tmp: Path, prefix: str, args: argparse.Namespace) -> dict[str, float]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    directory = tmp / f"node-{prefix or 'this'}"
    directory.mkdir()
    component = directory / "tiny.wasm"
    tiny_component(component)  # never runs a task: each stays pending with its input
    config = write_config(
        directory,
        AGENT.format(component=component),
        port=port,
        node=f"max_open_tasks_per_agent = {args.tasks + 10}\n",
    )
    node = start_process(
        [sys.executable, "-m", "node", "run", "--config", str(config)],
        f"{base}/api/v1/health",
        timeout=180,
        cwd=tree,
    )
    try:
        return measure(base, node.pid, args)
    finally:
        stop_process(node)


def measure(base: str, pid: int, args: argparse.Namespace) -> dict[str, float]:
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    with httpx.Client(base_url=base, headers=headers, timeout=60) as http:
        for n in range(args.tasks):
            body = {"from": "operator", "to": "worker", "input": {"n": n, "text": "x" * 1000}}
            http.post("/api/v1/a2a/tasks", json=body).raise_for_status()
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"pageSize": args.page}}

        def a2a() -> None:
            answer = http.post("/a2a/worker", json=rpc).json()
            assert len(answer["result"]["tasks"]) == args.page, answer

        def rest() -> None:
            listed = http.get("/api/v1/a2a/tasks", params={"agent": "worker", "limit": args.page})
            assert len(listed.json()) == args.page, listed.text[:200]

        a2a(), rest()  # warm both paths
        a2a_ms: list[float] = []
        rest_ms: list[float] = []
        for _ in range(args.batches):
            for call, into in ((a2a, a2a_ms), (rest, rest_ms)):
                before = process_seconds(pid)
                for _ in range(args.batch):
                    call()
                into.append((process_seconds(pid) - before) * 1000 / args.batch)
    a2a_median, rest_median = statistics.median(a2a_ms), statistics.median(rest_ms)
    return {
        "list_tasks_cpu_ms": round(a2a_median, 2),
        "rest_page_cpu_ms": round(rest_median, 2),
        "list_tasks_over_rest": round(a2a_median / rest_median, 2),
    }


if __name__ == "__main__":
    main()
