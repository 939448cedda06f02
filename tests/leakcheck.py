"""No process the suite starts may outlive it (issue 37 item 9).

Two guards over the same scan of /proc:

* a pytest plugin (loaded by tests/conftest.py): when the session finishes, every process still
  alive that descends from pytest, or shares its session when pytest leads one, is listed,
  killed, and the run fails;
* `python -m tests.leakcheck pytest ARGS...` (what scripts/test runs): pytest in a session of
  its own, and afterwards every process left in that session is listed and killed and the exit
  status is 1, which also catches a node orphaned by a killed parent (it keeps the session but
  loses its parent).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

GRACE_SECS = 5.0  # a process told to stop just now may still be exiting


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, session id) of a live process, None when gone or a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    state, ppid, sid = fields[0], int(fields[1]), int(fields[3])
    if state in ("Z", "X"):
        return None
    return state, ppid, sid


def _all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def leftovers(root: int, session: int | None) -> list[int]:
    """Live processes under `root` (its descendants), or in `session` when given; not `root`."""
    stats = {pid: s for pid in _all_pids() if (s := _stat(pid)) is not None}
    found: set[int] = set()
    if session is not None:
        found |= {pid for pid, (_, _, sid) in stats.items() if sid == session}
    children: dict[int, list[int]] = {}
    for pid, (_, ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    stack = list(children.get(root, ()))
    while stack:
        pid = stack.pop()
        found.add(pid)
        stack += children.get(pid, ())
    found.discard(root)
    found.discard(os.getpid())
    return sorted(found)


def describe(pids: Iterable[int]) -> list[str]:
    lines = []
    for pid in pids:
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        lines.append(f"  pid {pid}: {args.strip()[:200]}")
    return lines


def reap(root: int, session: int | None) -> list[str]:
    """Wait up to GRACE_SECS for the leftovers to end; SIGKILL the rest. What was killed."""
    deadline = time.monotonic() + GRACE_SECS
    while (pids := leftovers(root, session)) and time.monotonic() < deadline:
        time.sleep(0.2)
    if not pids:
        return []
    lines = describe(pids)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return lines


def _own_session() -> int | None:
    return os.getpid() if os.getsid(0) == os.getpid() else None


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    killed = reap(os.getpid(), _own_session())
    if killed:
        message = "processes the tests started outlived them (killed now):\n" + "\n".join(killed)
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_sep("=", "leaked processes", red=True)
            reporter.write_line(message)
        else:
            print(message, file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def main(argv: list[str]) -> int:
    """Run argv in a session of its own; fail when anything of that session outlives it."""
    if not argv:
        print("usage: python -m tests.leakcheck COMMAND [ARGS...]", file=sys.stderr)
        return 2
    child = subprocess.Popen(argv, start_new_session=True)

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, forward)
    status = child.wait()
    killed = reap(child.pid, child.pid)
    if killed:
        print(
            f"{argv[0]}: processes it started outlived it (killed now):\n" + "\n".join(killed),
            file=sys.stderr,
        )
        return status or 1
    return status


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
