"""An MCP resource read ÷ the equivalent REST page, in one run: the time of
`resources/read agent://counter/findings?limit=50` (POST /api/v1/mcp/counter, one JSON answer)
against GET /api/v1/findings?limit=50 on the same node, whose journal holds `--findings`
findings of that agent. The reads alternate, one at a time, over one keep-alive connection
each; the figures are medians and the ratio theirs (the machine is shared: the ratio is the
figure to compare).

Run: .venv/bin/python bench/mcp_resources.py [--findings 2000] [--reads 300]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from node.ops.polling import wait_until

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench.common import report, start_process, stop_process  # noqa: E402
from harness.node import ADMIN_TOKEN, free_port, write_config  # noqa: E402

AGENT = """
[[agents]]
name = "counter"
component = "{component}"
tick_interval_ms = 600000
mcp = true
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--findings", type=int, default=2000)
    parser.add_argument("--reads", type=int, default=300)
    args = parser.parse_args()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    component = ROOT / "build" / "agents" / "counter.wasm"
    with tempfile.TemporaryDirectory(prefix="mcp-resources-") as tmp:
        config = write_config(Path(tmp), AGENT.format(component=component), port=port)
        node = start_process(
            [sys.executable, "-m", "node", "run", "--config", str(config)],
            f"{base}/api/v1/health",
            timeout=180,
        )
        try:
            figures = measure(base, headers, args.findings, args.reads)
        finally:
            stop_process(node)
    report({"bench": "mcp_resources", **figures})


def measure(base: str, headers: dict[str, str], findings: int, reads: int) -> dict[str, float]:
    with httpx.Client(base_url=base, headers=headers, timeout=60) as http:
        wait_until(
            lambda: http.get("/api/v1/status").json()[0]["status"] != "starting",
            180,
            "the counter agent starts",
            interval=0.2,
        )
        for n in range(findings):
            body = {"agent": "counter", "severity": "low", "title": f"f{n}", "detail": "x" * 80}
            http.post("/api/v1/findings", json=body).raise_for_status()
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "resources/read"}
        rpc["params"] = {"uri": "agent://counter/findings?limit=50"}
        mcp, rest = [], []
        for _ in range(reads):
            started = time.perf_counter()
            answer = http.post(
                "/api/v1/mcp/counter", json=rpc, headers={"Accept": "application/json"}
            )
            mcp.append(time.perf_counter() - started)
            page = json.loads(answer.json()["result"]["contents"][0]["text"])
            assert len(page["findings"]) == 50, page
            started = time.perf_counter()
            listed = http.get("/api/v1/findings", params={"limit": 50})
            rest.append(time.perf_counter() - started)
            assert len(listed.json()["findings"]) == 50
    mcp_ms, rest_ms = statistics.median(mcp) * 1000, statistics.median(rest) * 1000
    return {
        "findings": findings,
        "reads": reads,
        "mcp_read_median_ms": round(mcp_ms, 3),
        "rest_page_median_ms": round(rest_ms, 3),
        "mcp_over_rest": round(mcp_ms / rest_ms, 2),
    }


if __name__ == "__main__":
    main()
