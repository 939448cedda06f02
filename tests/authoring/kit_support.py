"""Running `agent-node agent ...` as an author does: the installed CLI in a subprocess, in a
project folder outside the repo, with the compiled-component cache shared with the tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.runtime_support import COMPILED_CACHE

BIN = Path(sys.executable).parent


def author_env(**extra: str) -> dict[str, str]:
    """The author's shell: agent-node on PATH, and the tests' compiled cache (a cold compile
    of a component costs tens of seconds; the cache is keyed by its sha256, so sharing it
    cannot hide a difference)."""
    env = {**os.environ, "AGENT_NODE_COMPILED_CACHE": str(COMPILED_CACHE)}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.pop("VIRTUAL_ENV", None)
    return {**env, **extra}


def agent(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600):
    return subprocess.run(
        [str(BIN / "agent-node"), "agent", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env or author_env(),
        timeout=timeout,
    )


def agent_test(project: Path, *args: str) -> tuple[int, dict[str, Any]]:
    run = agent("test", str(project), "--json", *args, cwd=project)
    assert run.stdout, run.stderr
    return run.returncode, json.loads(run.stdout)


def of_type(report: dict[str, Any], type_: str) -> list[dict[str, Any]]:
    return [e for e in report["events"] if e["type"] == type_]


def answered_by_the_tools_template(project: Path, wasm: Path, question: dict) -> dict:
    """`agent test` of a tools template's project, answered from its answers.json: its report,
    once the task's output is the two rounds' answer (Python's and JavaScript's alike)."""
    done = agent(
        "test", str(project), "--json", "--wasm", str(wasm), "--input", json.dumps(question),
        "--infer-file", "answers.json", cwd=project,
    )  # fmt: skip
    report = json.loads(done.stdout)
    assert done.returncode == 0, report
    assert report["task"]["output"] == {
        "answer": "Tomorrow in Paris: sunny, 21 C.",
        "rounds": 2,
        "input_tokens": 100,
        "output_tokens": 21,
    }
    return report
