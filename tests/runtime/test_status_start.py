"""GET /api/v1/status of a live agent (issue 37 item 8): `idle`/`running` once its instance
runs, with uptime and heap. What it says while a fresh node compiles (`stopped`, with `phase` and
`reason`) is checked beside the cold compiles of tests/node/test_compile_process.py."""

from __future__ import annotations

import httpx

from node.runtime.compiled_cache import COMPILED_CACHE_ENV
from tests.polling import wait_until
from tests.runtime.test_runtime_node import agent_toml
from tests.support import NodeProcess, write_config

LIVE = {"idle", "running"}


def test_a_live_agent_is_running_or_idle_with_uptime(tmp_path, built_agents, monkeypatch):
    """Once compiled (the shared cache), an agent's instance runs: idle, uptime counting."""
    from tests.runtime_support import COMPILED_CACHE

    monkeypatch.setenv(COMPILED_CACHE_ENV, str(COMPILED_CACHE))
    toml = agent_toml("hello", built_agents["hello"], "tick_interval_ms = 60000")
    with NodeProcess(write_config(tmp_path, toml)) as node, node.client() as http:

        def live() -> dict | None:
            (s,) = http.get("/api/v1/status").json()
            return s if s["status"] in LIVE and s["uptime_ms"] > 0 else None

        s = wait_until(live, 60, "hello runs", retry_on=(httpx.HTTPError,))
        assert s["memory_profile"]["heap_bytes"] > 0 and "phase" not in s
