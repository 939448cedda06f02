#!/usr/bin/env python3
"""A cold `scripts/run` on a fresh clone: seconds to the ready line and to all agents running.

Clones SOURCE (default: this checkout) into a new temporary folder, so there is no .venv, no
built agent and no compiled component, and runs its `scripts/run` with pip's cache off
(PIP_NO_CACHE_DIR=1: every package comes from the index). It follows the node's log: `ready:`
and the start-up lines `agent NAME running, N of M` / `agent NAME did not start, N of M`; when
the M-th agent is settled it stops the node (SIGTERM to its process group), removes the clone
and prints, as its last line, one JSON object with both times and the load average before and
after (the machine's load changes the figure more than anything else), and the CPU seconds the
whole run used (which the load does not stretch).

Usage: bench/cold_run.py [--source DIR] [--config PATH] [--timeout SECS] [--keep]
The example config listens on 127.0.0.1:8080, which must be free.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETTLED = re.compile(r"agent (\S+) (?:running|did not start), (\d+) of (\d+)")


def load() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def port_free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=str(ROOT), help="the checkout to clone")
    parser.add_argument("--config", help="scripts/run's argument (default: its own)")
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--keep", action="store_true", help="leave the clone")
    args = parser.parse_args()
    if not port_free(8080):
        print("cold_run: 127.0.0.1:8080 is in use; the example config needs it", file=sys.stderr)
        return 2
    folder = Path(tempfile.mkdtemp(prefix="coldrun-"))
    clone = folder / "agent-node"
    subprocess.run(["git", "clone", "--quiet", args.source, str(clone)], check=True)
    commit = subprocess.run(
        ["git", "-C", str(clone), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    command = [str(clone / "scripts" / "run"), *([args.config] if args.config else [])]
    env = {**os.environ, "PIP_NO_CACHE_DIR": "1"}
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    load_before = load()
    started = time.monotonic()
    run = subprocess.Popen(
        command,
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert run.stdout is not None
    figures: dict[str, object] = {"ready_secs": None, "agents_secs": None}
    settled = 0
    try:
        for line in run.stdout:
            at = time.monotonic() - started
            if "Location 'file:" in line:  # pip's notes about a local index: noise here
                continue
            print(f"{at:7.1f} s  {line.rstrip()}", file=sys.stderr)
            if figures["ready_secs"] is None and "ready: the operator console" in line:
                figures["ready_secs"] = round(at, 1)
            match = SETTLED.search(line)
            if match:
                settled += 1
                figures["agents"] = int(match[3])
                if int(match[2]) == int(match[3]):
                    figures["agents_secs"] = round(at, 1)
                    break
            if at > args.timeout:
                break
    finally:
        try:
            os.killpg(run.pid, signal.SIGTERM)
            run.wait(60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    used = resource.getrusage(resource.RUSAGE_CHILDREN)  # the run and all it waited for
    figures |= {
        # CPU seconds of everything the run did (pip, the builds, the node and its compiles):
        # what the load average cannot stretch; on an idle machine the wall time is about
        # cpu_secs / cpus plus the downloads
        "cpu_secs": round(used.ru_utime + used.ru_stime, 1),
        "settled": settled,
        "load_before": load_before,
        "load_after": load(),
        "cpus": os.cpu_count() or 0,
        "commit": commit,
    }
    print(json.dumps(figures))
    return 0 if figures["agents_secs"] is not None else 1


if __name__ == "__main__":
    raise SystemExit(main())
