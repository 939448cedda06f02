"""POST /api/v1/findings at two revisions side by side: two node processes run at once and are
loaded in alternating rounds, so the machine's drift hits both (bench/journal.py's (c) compares
one revision with a bare server, and its figures of two runs are not comparable here).

Run: .venv/bin/python bench/findings_ab.py A B [--rounds 8] [--requests 3000]
  e.g. .venv/bin/python bench/findings_ab.py 9fe7016 WT
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import http_load, report, start_process, stop_process
from bench.replay_ab import export
from tests.support import ADMIN_TOKEN, auth, free_port, write_config
from tests.sync_support import prefill


def start_node(root: Path, config: Path, port: int) -> tuple[subprocess.Popen, str]:
    """`python -m node run` from `root`, so the node runs that revision's code."""
    url = f"http://127.0.0.1:{port}"
    proc = start_process(
        [sys.executable, "-m", "node", "run", "--config", str(config)],
        url + "/api/v1/health",
        timeout=60,
        cwd=root,
    )
    return proc, url


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--requests", type=int, default=3000)
    args = parser.parse_args()
    body = lambda i: {"agent": f"bench{i % 8}", "severity": "low", "title": f"t{i}"}  # noqa: E731
    headers = auth(ADMIN_TOKEN)
    with tempfile.TemporaryDirectory(prefix="findings-ab-") as tmp:
        nodes: dict[str, tuple[subprocess.Popen, str]] = {}
        try:
            for i, rev in enumerate((args.a, args.b)):
                root = export(rev, Path(tmp))
                port = free_port()
                config = write_config(Path(tmp) / f"node{i}", port=port)
                # the 8 journals exist before findings are posted about them (404 otherwise)
                prefill(config, {f"bench{j}": 1 for j in range(8)})
                nodes[rev] = start_node(root, config, port)
            for _, url in nodes.values():  # warm-up
                await http_load(
                    url + "/api/v1/findings",
                    concurrency=64,
                    requests=500,
                    body=body,
                    headers=headers,
                )
            rates: dict[str, list[float]] = {args.a: [], args.b: []}
            for i in range(args.rounds):
                for rev in (args.a, args.b) if i % 2 else (args.b, args.a):
                    url = nodes[rev][1] + "/api/v1/findings"
                    result = await http_load(
                        url, concurrency=64, requests=args.requests, body=body, headers=headers
                    )
                    rates[rev].append(result["requests_per_s"])
                print(
                    f"round {i + 1}: " + ", ".join(f"{r} {v[-1]:,.0f}/s" for r, v in rates.items())
                )
        finally:
            for proc, _ in nodes.values():
                stop_process(proc)
    a, b = (statistics.median(rates[r]) for r in (args.a, args.b))
    print(f"median of rounds: {args.a} {a:,.0f}/s, {args.b} {b:,.0f}/s, b/a {b / a:.3f}")
    report(
        {
            "bench": "findings_ab",
            "a": args.a,
            "b": args.b,
            "a_per_s": round(a),
            "b_per_s": round(b),
            "b_over_a": round(b / a, 3),
            "rounds": {r: [round(x) for x in v] for r, v in rates.items()},
        }
    )


if __name__ == "__main__":
    asyncio.run(main())
