"""The agents of agents/, built, for the runtime tests.

`built_agents` runs scripts/build-agents once per session (its cache makes that instant when
the sources did not change). Tests compile components into .cache/wasmtime as they first
load them (tests.runtime_support.COMPILED_CACHE), so only the first session after a change
pays for compiling, a few seconds per Python agent, inside the test that loads it first.
tests/conftest.py loads this module as a plugin, so every test can use the fixture; helpers
to run agents are in tests.runtime_support.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def built_agents() -> dict[str, Path]:
    """{agent name: path of its .wasm}, built from agents/ through the build script."""
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build-agents"), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if run.returncode != 0:
        pytest.fail(f"scripts/build-agents failed:\n{run.stderr}")
    agents = {name: Path(p) for name, p in json.loads(run.stdout).items()}
    precompile(agents.values())
    return agents


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
