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
    return {name: Path(p) for name, p in json.loads(run.stdout).items()}


@pytest.fixture(autouse=True)
def shared_compiled_cache(monkeypatch):
    """Every node a test starts (in process or as a subprocess) shares one compiled cache:
    compiling a Python-built component takes seconds, loading it from the cache milliseconds."""
    from node.api.runtime import COMPILED_CACHE_ENV
    from tests.runtime_support import COMPILED_CACHE

    monkeypatch.setenv(COMPILED_CACHE_ENV, str(COMPILED_CACHE))
