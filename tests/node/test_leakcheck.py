"""The suite fails when a process it started outlives it (tests/leakcheck.py; issue 37 item 9)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT


def leakcheck(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "tests.leakcheck", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def killed_pids(output: str) -> list[int]:
    return [int(pid) for pid in re.findall(r"pid (\d+):", output)]


def test_a_command_that_leaves_a_process_behind_fails_and_the_process_is_killed():
    done = leakcheck("sh", "-c", "sleep 307 & echo started")
    assert done.returncode == 1
    assert "outlived it" in done.stderr and "sleep 307" in done.stderr
    (pid,) = killed_pids(done.stderr)
    assert not alive(pid)


def test_a_command_that_cleans_up_passes_with_its_own_status():
    assert leakcheck("sh", "-c", "sleep 0.1 & wait").returncode == 0
    assert leakcheck("sh", "-c", "exit 3").returncode == 3


def test_pytest_fails_a_session_whose_test_leaves_a_process_running(tmp_path):
    (tmp_path / "test_leaky.py").write_text(
        "import subprocess\n\n"
        "def test_starts_and_forgets():\n"
        "    subprocess.Popen(['sleep', '308'])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.leakcheck", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stdout  # the test itself passed
    assert "1 passed" in done.stdout and "leaked processes" in done.stdout
    assert "sleep 308" in done.stdout
    (pid,) = killed_pids(done.stdout)
    assert not alive(pid)
