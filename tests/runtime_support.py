"""Helpers for the runtime tests: run agents with in-memory hosts, wait for conditions."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from node.runtime import AgentRuntime, AgentSpec, RuntimeOptions
from node.runtime.memhost import MemoryHost

ROOT = Path(__file__).resolve().parent.parent
# Compiled components persist across sessions (gitignored), so only changed agents compile.
COMPILED_CACHE = Path(os.environ.get("AGENT_COMPILED_CACHE", ROOT / ".cache" / "wasmtime"))


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.02) -> Any:
    """Poll until `predicate()` is truthy; returns its value or fails the test."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    pytest.fail(f"condition not met within {timeout} s")


@contextmanager
def running(
    specs: list[AgentSpec], hosts: dict[str, MemoryHost] | None = None, **options: Any
) -> Iterator[tuple[AgentRuntime, dict[str, MemoryHost]]]:
    """Run `specs` with MemoryHosts (given, or fresh ones) and stop everything afterwards."""
    hosts = dict(hosts or {})

    def factory(spec: AgentSpec, stopping: Any) -> tuple[MemoryHost, MemoryHost]:
        host = hosts.setdefault(spec.name, MemoryHost(spec.name))
        return host, host

    opts = {"cache_dir": COMPILED_CACHE, "restart_backoff_ms": 50, **options}
    runtime = AgentRuntime(specs, factory, RuntimeOptions(**opts))
    runtime.start()
    try:
        yield runtime, hosts
    finally:
        runtime.stop(timeout=15)
