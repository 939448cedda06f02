"""CPU seconds of processes and of their threads, from the kernel's counters (/proc).

Counters, unlike wall-clock rates, hardly drift with the machine's other tenants: what a run
cost is the difference of two snapshots. Python threads are told apart by name through one
`py-spy dump` (Python 3.11 does not give its threads OS names): the event loop (MainThread),
the journal's writer (eventstore-writer: LMDB commits and folds), the executor (signature
checks of imports, `to_thread` work) and the rest.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
PY_SPY = Path(sys.executable).parent / "py-spy"
THREAD_LINE = re.compile(r'^Thread (\d+) \([^)]*\): "([^"]*)"', re.M)


def _utime_stime(stat: str) -> int:
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def process_seconds(pid: int) -> float:
    """utime + stime of every thread of `pid` so far (0 once it is gone)."""
    try:
        return _utime_stime(Path(f"/proc/{pid}/stat").read_text()) / TICKS
    except (FileNotFoundError, ProcessLookupError):
        return 0.0


def thread_seconds(pid: int) -> dict[int, float]:
    """utime + stime of each live thread of `pid`, by OS thread id."""
    out: dict[int, float] = {}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:
        return out
    for task in tasks:
        try:
            out[int(task.name)] = _utime_stime((task / "stat").read_text()) / TICKS
        except (FileNotFoundError, ProcessLookupError):
            continue
    return out


def thread_names(pid: int) -> dict[int, str]:
    """OS thread id → Python thread name, by py-spy (empty when py-spy is not installed)."""
    if not PY_SPY.exists():
        return {}
    done = subprocess.run(
        [str(PY_SPY), "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60
    )
    return {int(tid): name for tid, name in THREAD_LINE.findall(done.stdout)}


def kind_of(name: str) -> str:
    if name == "MainThread":
        return "loop"
    if name == "eventstore-writer":
        return "writer"
    if name.startswith(("ThreadPoolExecutor", "asyncio_")):
        return "executor"
    return "other"


def by_kind(
    pid: int, before: dict[int, float], after: dict[int, float], names: dict[int, str]
) -> dict[str, float]:
    """CPU seconds between two snapshots of one process, summed by thread kind. Threads that
    ended before `after` are lost to it: take `after` while the process still runs."""
    out: dict[str, float] = {"loop": 0.0, "writer": 0.0, "executor": 0.0, "other": 0.0}
    for tid, seconds in after.items():
        name = "MainThread" if tid == pid else names.get(tid, "")
        out[kind_of(name)] += seconds - before.get(tid, 0.0)
    return out
