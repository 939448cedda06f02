"""GET /api/v1/status tells the truth while a fresh node compiles its agents (issue 37 item 8):
an agent with no live instance yet is `stopped`, with what it is doing (`phase`) and why
(`reason`), uptime and heap 0; `idle`/`running` only once its instance runs. A real node
process with an empty compiled cache, real components, the CLI as a real process."""

from __future__ import annotations

import time

import httpx
import pytest

from node.runtime.compiled_cache import COMPILED_CACHE_ENV
from node.runtime.compiler import default_parallelism
from tests.polling import wait_until
from tests.runtime.test_runtime_node import agent_toml
from tests.support import NodeProcess, logs_on_failure, run_cli, write_config

# distinct components: each compiles on its own, `default_parallelism()` at a time
COMPONENTS = ["hello", "task_worker", "mcp_tools", "cashier", "secrets_reader", "payer"]
LIVE = {"idle", "running"}


@pytest.mark.timeout(900)  # cold compiles: seconds each, minutes on a loaded host
def test_agents_compiling_at_start_are_stopped_with_their_phase(
    tmp_path, built_agents, monkeypatch
):
    monkeypatch.delenv(COMPILED_CACHE_ENV, raising=False)  # data/compiled: empty, all compile
    names = COMPONENTS[: max(3, default_parallelism() + 1)]  # more than the compile slots
    toml = "".join(
        agent_toml(name, built_agents[name], "tick_interval_ms = 60000") for name in names
    )
    node = NodeProcess(write_config(tmp_path, toml))
    seen: dict[str, set[str]] = {name: set() for name in names}
    with logs_on_failure(node.log_path), node, node.client() as http:
        first = http.get("/api/v1/status").json()
        cli = run_cli("status", "--url", node.url, "--token", http.headers["Authorization"][7:])
        deadline = time.monotonic() + 800
        while time.monotonic() < deadline:
            statuses = http.get("/api/v1/status").json()
            for s in statuses:
                if s["status"] in LIVE:
                    # a live instance: the spec's object, no phase
                    assert "phase" not in s and "reason" not in s, s
                    continue
                assert s["status"] == "stopped", s
                assert s["uptime_ms"] == 0 and s["memory_profile"]["heap_bytes"] == 0, s
                assert s["phase"] and s["reason"], s
                seen[s["name"]].add(s["phase"])
            if all(s["status"] in LIVE for s in statuses):
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"the agents never all ran: {statuses}")
        assert all(s["uptime_ms"] >= 0 for s in statuses)

    # right after the start, none of them ran yet: nothing was compiled
    assert {s["status"] for s in first} == {"stopped"}, first
    phases = set().union(*seen.values())
    assert "compiling" in phases, seen
    # more agents than compile slots: one of them waited for a slot, and said so
    assert "waiting to compile" in phases, seen
    # the CLI shows the phase and its reason
    assert cli.returncode == 0, cli.stderr
    header, *rows = cli.stdout.splitlines()
    assert header.split()[-1] == "PHASE"
    assert any(" stopped " in row and "compil" in row for row in rows), cli.stdout


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
