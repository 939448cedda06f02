"""The agents of agents/, built, for the runtime tests.

Before the first test, scripts/build-agents runs (its cache makes that instant when the sources
did not change) and every agent is compiled into .cache/wasmtime
(tests.runtime_support.COMPILED_CACHE), so only the first session after a change pays for
compiling, and no test pays for it inside its own timeout. `built_agents` gives the paths.
tests/conftest.py loads this module as a plugin, so every test can use the fixture; helpers
to run agents are in tests.runtime_support.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Set to 1 by scripts/test for a session of tests that run no agent: it starts while the other
# shard compiles them, instead of waiting for that compile or compiling them a second time.
NO_PRECOMPILE_ENV = "AGENT_NODE_TESTS_NO_PRECOMPILE"


_built: dict[str, Path] = {}


def pytest_sessionstart(session: pytest.Session) -> None:
    """Build and compile the agents before the first test runs, so that their cost (minutes on a
    fresh machine, instant once cached) counts against no test's timeout."""
    prepare()


def prepare() -> None:
    """Also run alone (`python -m tests.conftest_agents`): scripts/test does, once, at the start
    of the shard that needs the agents first, so that two sessions do not both compile every
    agent at the same time."""
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build-agents"), "--json"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if run.returncode != 0:
        raise pytest.UsageError(f"scripts/build-agents failed:\n{run.stderr}")
    _built.update({name: Path(p) for name, p in json.loads(run.stdout).items()})
    if os.environ.get(NO_PRECOMPILE_ENV) != "1":
        precompile(_built.values())


@pytest.fixture(scope="session")
def built_agents() -> dict[str, Path]:
    """{agent name: path of its .wasm}, built from agents/ through the build script."""
    return dict(_built)


def precompile(components: Iterable[Path]) -> None:
    """Compile every agent into the shared compiled cache once per session (instant when it is
    warm), so that no test pays a cold compile, seconds per component, inside its own waits:
    on a fresh machine the first node to load an agent would otherwise be slow to answer."""
    from node.runtime.engine import AgentEngine
    from tests.runtime_support import COMPILED_CACHE

    engine = AgentEngine(COMPILED_CACHE)

    def load(path: Path) -> str:
        try:
            engine.load(path)
        except Exception as exc:  # a test of that agent reports it when it loads it
            return f"precompile {path.name}: {exc}"
        return ""

    try:
        with ThreadPoolExecutor(2) as pool:
            for problem in pool.map(load, list(components)):
                if problem:
                    print(problem, file=sys.stderr)
    finally:
        engine.close()


if __name__ == "__main__":
    prepare()
