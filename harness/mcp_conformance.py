"""Run the MCP project's conformance tester (npm @modelcontextprotocol/conformance) against a
node's MCP endpoint: `python -m harness.mcp_conformance --url <node>/api/v1/mcp/<agent>
--token <operate token>` (docs/protocols/conformance.md).

The tester connects without credentials, and every node endpoint needs a bearer token, so it
talks to a local pass-through that adds the token and forwards everything else (the Origin
included, which the node checks: give the pass-through's origin in the node's
`[mcp] allowed_origins`, `--port` fixes it). The tester needs Node.js 22 or later (`--tester`).
Prints the tester's report, then as its last line one JSON object: scenarios and checks passed
and failed, and the failed checks by scenario.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

TESTER = "@modelcontextprotocol/conformance@0.1.16"
HOP_BY_HOP = frozenset(
    {"host", "connection", "keep-alive", "transfer-encoding", "content-length", "te", "upgrade"}
)


def passthrough(target: str, token: str) -> web.Application:
    """Forwards every request to `target` (same path and query) with `Authorization: Bearer
    token`, streaming the answer back as it comes (MCP answers may be SSE)."""
    session: dict[str, aiohttp.ClientSession] = {}

    async def forward(request: web.Request) -> web.StreamResponse:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        headers["Authorization"] = f"Bearer {token}"
        url = target.rstrip("/") + request.rel_url.path_qs
        async with session["http"].request(
            request.method, url, headers=headers, data=await request.read()
        ) as upstream:
            answer = web.StreamResponse(
                status=upstream.status,
                headers={k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP},
            )
            await answer.prepare(request)
            async for chunk in upstream.content.iter_any():
                await answer.write(chunk)
            await answer.write_eof()
            return answer

    async def lifecycle(app: web.Application):  # type: ignore[no-untyped-def]
        session["http"] = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120))
        yield
        await session["http"].close()

    app = web.Application()
    app.cleanup_ctx.append(lifecycle)
    app.router.add_route("*", "/{tail:.*}", forward)
    return app


def summarize(results_dir: Path) -> dict[str, Any]:
    """The tester's checks.json files (one per scenario) as passed/failed counts."""
    scenarios: dict[str, list[dict[str, Any]]] = {}
    for checks in sorted(results_dir.rglob("checks.json")):
        scenario = checks.parent.name.split("-20")[0].removeprefix("server-").strip()
        scenarios[scenario] = json.loads(checks.read_text())
    failed = {
        name: [c["id"] for c in checks if c.get("status") == "FAILURE"]
        for name, checks in scenarios.items()
    }
    warned = {
        name: [c["id"] for c in checks if c.get("status") == "WARNING"]
        for name, checks in scenarios.items()
    }
    statuses = [c.get("status") for checks in scenarios.values() for c in checks]
    return {
        "scenarios": len(scenarios),
        "scenarios_passed": sum(1 for ids in failed.values() if not ids),
        "checks_passed": statuses.count("SUCCESS"),
        "checks_failed": statuses.count("FAILURE"),
        "checks_warned": statuses.count("WARNING"),
        "failed": {name: ids for name, ids in sorted(failed.items()) if ids},
        "warned": {name: ids for name, ids in sorted(warned.items()) if ids},
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    parts = urlsplit(args.url)
    origin = f"{parts.scheme}://{parts.netloc}"
    runner = web.AppRunner(passthrough(origin, args.token))
    await runner.setup()
    site = web.TCPSite(runner, "localhost", args.port)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    local = f"http://localhost:{port}{parts.path}"
    out = Path(tempfile.mkdtemp(prefix="mcp-conformance-"))
    command = [*args.tester, "server", "--url", local, "-o", str(out)]
    command += ["--scenario", args.scenario] if args.scenario else ["--suite", args.suite]
    try:
        proc = await asyncio.create_subprocess_exec(*command, stdout=sys.stderr, env=os.environ)
        await asyncio.wait_for(proc.wait(), args.timeout)
    finally:
        await runner.cleanup()
    summary = summarize(out)
    shutil.rmtree(out, ignore_errors=True)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the node's MCP endpoint of an agent")
    parser.add_argument("--token", required=True, help="a token with the operate scope")
    parser.add_argument("--port", type=int, default=0, help="the pass-through's port")
    parser.add_argument(
        "--tester",
        nargs="+",
        default=["npx", "--yes", TESTER],
        help="the command that runs the tester (default: npx --yes " + TESTER + "); it needs "
        "Node.js 22 or later, e.g. --tester /path/to/node .../dist/index.js",
    )
    parser.add_argument("--scenario", default="", help="one scenario (default: --suite)")
    parser.add_argument("--suite", default="all", help="active, pending or all (default)")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args))))


if __name__ == "__main__":
    main()
