"""Helpers for the runtime tests: run agents with in-memory hosts."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from node.runtime import AgentRuntime, AgentSpec, RuntimeOptions
from node.runtime.memhost import MemoryHost

ROOT = Path(__file__).resolve().parent.parent
# Compiled components persist across sessions (gitignored), so only changed agents compile.
COMPILED_CACHE = Path(os.environ.get("AGENT_COMPILED_CACHE", ROOT / ".cache" / "wasmtime"))


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
