"""Every line an agent prints belongs to the run that printed it, whether the runs around it
printed nothing, whole lines, or more than one read takes (issue 26: the tick's output fast
paths must not move a line to another run), and the in-memory host stays bounded."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import wasmtime

from node.runtime import AgentSpec, Task
from node.runtime.memhost import MemoryHost
from node.runtime.output import OutputCapture
from tests.polling import wait_until
from tests.runtime_support import running

LINE = "y" * 1023  # what the hostile agent's `flood` case prints, `size // 1024` times


def lines_by_run(host: MemoryHost) -> list[tuple[str, str, list[str]]]:
    """(kind, detail, lines printed) of each finished run, in order, from the event order:
    the worker reports a run's output before its `run.finished`."""
    runs: list[tuple[str, str, list[str]]] = []
    current: tuple[str, str, list[str]] | None = None
    for type_, data in list(host.events):
        if type_ == "run.started":
            current = (data["kind"], data["detail"], [])
        elif type_ == "output":
            assert current is not None, f"a line outside any run: {data}"
            current[2].append(data["line"])
        elif type_ == "run.finished":
            assert current is not None
            runs.append(current)
            current = None
    return runs


def flood(task_id: str, lines: int) -> Task:
    return Task(task_id, "tester", json.dumps({"case": "flood", "size": lines * 1024}))


def test_quiet_runs_and_printing_runs_each_get_their_own_lines(built_agents, tmp_path):
    """hostile's tick prints nothing; its `flood` task prints whole lines. A quiet tick, a
    task printing 2 lines, quiet ticks, then a task printing 40 KiB (more than the first read
    of a run takes): each task's lines in its own run, none in a tick."""
    host = MemoryHost("hostile")
    spec = AgentSpec("hostile", built_agents["hostile"], tick_interval_ms=20)
    with running([spec], {"hostile": host}, output_dir=tmp_path) as (runtime, _):

        def ticks() -> int:
            return sum(1 for r in host.of_type("run.finished") if r["kind"] == "tick")

        wait_until(lambda: ticks() >= 1, timeout=120)
        host.tasks.append(flood("t-1", 2))
        runtime.notify_task("hostile")
        wait_until(lambda: host.of_type("task.completed"), timeout=60)
        after_first = ticks()
        wait_until(lambda: ticks() >= after_first + 3, timeout=60)
        host.tasks.append(flood("t-2", 40))
        runtime.notify_task("hostile")
        wait_until(lambda: len(host.of_type("task.completed")) == 2, timeout=60)
        wait_until(lambda: ticks() >= after_first + 5, timeout=60)

    runs = lines_by_run(host)
    printed = {detail: lines for kind, detail, lines in runs if kind == "task"}
    assert printed == {"t-1": [LINE] * 2, "t-2": [LINE] * 40}
    tick_lines = [lines for kind, _, lines in runs if kind == "tick" and lines]
    assert tick_lines == []
    # the quiet ticks ran between the two tasks, so the tasks' lines did not wait for them
    kinds = [(kind, detail) for kind, detail, _ in runs]
    first, second = kinds.index(("task", "t-1")), kinds.index(("task", "t-2"))
    assert sum(1 for kind, _ in kinds[first:second] if kind == "tick") >= 3


def capture(tmp_path: Path) -> tuple[OutputCapture, int]:
    """An OutputCapture on fresh files, and a descriptor appending to its stdout file as
    the agent's would."""
    output = OutputCapture(tmp_path, "agent", max_line=64, max_lines=100, max_bytes=1 << 20)
    output.attach(wasmtime.WasiConfig())
    fd = os.open(output.path("stdout"), os.O_WRONLY)
    return output, fd


def collected(output: OutputCapture) -> list[tuple[str, str]]:
    output.collect()
    return output.drain()


def test_a_read_with_nothing_new_then_lines_then_a_partial_line(tmp_path):
    """Nothing, then whole lines (the fast path), then a line in two writes across two
    reads (the buffered path), then a line longer than the cut: each read returns exactly
    what was complete by then."""
    output, fd = capture(tmp_path)
    try:
        assert collected(output) == []
        os.write(fd, b"one\ntwo\n")
        assert collected(output) == [("stdout", "one"), ("stdout", "two")]
        assert collected(output) == []
        os.write(fd, b"thr")
        assert collected(output) == []  # incomplete: held for the run that ends it
        os.write(fd, b"ee\nfour\n")
        assert collected(output) == [("stdout", "three"), ("stdout", "four")]
        os.write(fd, b"x" * 5000 + b"\n")  # more than the first read takes
        assert collected(output) == [("stdout", "x" * 64 + " [cut]")]
        os.write(fd, b"tail")
    finally:
        os.close(fd)
        output.detach()  # the instance ends: its unterminated last line is not lost
    assert output.drain() == [("stdout", "tail")]


def test_memory_host_keeps_its_newest_events_and_counts_the_rest():
    host = MemoryHost("a", max_events=3)
    for i in range(5):
        host.log("info", f"line {i}")
    kept: list[Any] = [data["message"] for _, data in host.events]
    assert kept == ["line 2", "line 3", "line 4"]
    assert host.dropped_events == 2
