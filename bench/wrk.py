"""wrk as the HTTP benches' load generator, with the servers and the client on separate cores.

A Python client saturates at about 12,800 requests/s on this machine, below the bare aiohttp
peer, so a ratio measured with it hid a 40 % slowdown of POST /api/v1/findings (issue 26). wrk,
a C client, is never the bottleneck. Like `../shared/tools/perf-guard`, the servers run on CPU 0
and wrk on CPU 1 (where there are two), so this measures what perf-guard measures.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path


def ensure_wrk() -> str:
    """The wrk binary, installed from Debian's archive when it is missing (as perf-guard does)."""
    found = shutil.which("wrk")
    if found is None:
        sudo = [] if os.geteuid() == 0 else ["sudo"]
        subprocess.run([*sudo, "apt-get", "install", "-y", "-q", "wrk"], capture_output=True)
        found = shutil.which("wrk")
    if found is None:
        raise SystemExit("wrk is not installed and apt-get could not install it")
    return found


def pinned(cpu: int) -> list[str]:
    """A command prefix that runs on one CPU, where there are two or more to separate."""
    if shutil.which("taskset") and (os.cpu_count() or 1) > 1:
        return ["taskset", "-c", str(cpu)]
    return []


SERVER_CPU, CLIENT_CPU = 0, 1


def post_rate(
    url: str,
    body: dict,
    headers: dict[str, str] | None = None,
    seconds: int = 5,
    connections: int = 64,
) -> dict[str, float]:
    """POST `body` to `url` for `seconds` with `connections` open; requests/s and p99 in ms.

    Any non-2xx answer fails the bench: a server that answers errors fast is not fast."""
    wrk = ensure_wrk()
    lines = [
        'wrk.method = "POST"',
        f"wrk.body = {json.dumps(json.dumps(body))}",
        'wrk.headers["Content-Type"] = "application/json"',
    ]
    lines += [f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in (headers or {}).items()]
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write("\n".join(lines) + "\n")
    try:
        out = subprocess.run(
            [
                *pinned(CLIENT_CPU),
                wrk,
                "-t1",
                f"-c{connections}",
                f"-d{seconds}s",
                "--latency",
                "-s",
                script.name,
                url,
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    finally:
        Path(script.name).unlink()
    if "Non-2xx" in out:
        raise SystemExit(f"{url} answered errors under load:\n{out}")
    rate = re.search(r"^Requests/sec:\s+([\d.]+)", out, re.M)
    p99 = re.search(r"^\s+99%\s+([\d.]+)(us|ms|s)\b", out, re.M)
    if rate is None:
        raise SystemExit(f"wrk printed no rate for {url}:\n{out}")
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}
    return {
        "requests_per_s": float(rate.group(1)),
        "p99_ms": round(float(p99.group(1)) * scale[p99.group(2)], 2) if p99 else float("nan"),
    }
