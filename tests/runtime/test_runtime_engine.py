"""Loading components: the compiled cache, bad components, measured memory."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import wasmtime

from node.runtime import AgentRuntime, AgentSpec, RuntimeOptions
from node.runtime.compiler import CompileError, CompileLimits
from node.runtime.engine import AgentEngine
from node.runtime.engine_settings import COMPILER_ENV
from node.runtime.memhost import MemoryHost
from node.runtime.memory import live_regions
from tests.polling import wait_until
from tests.runtime_support import COMPILED_CACHE, running


def test_second_load_deserializes_instead_of_compiling(built_agents, tmp_path):
    wasm = built_agents["bad_loop"]
    first = AgentEngine(cache_dir=tmp_path)
    loaded = first.load(wasm)
    assert (loaded.cache_hit, first.compiles) == (False, 1)
    assert len(list(tmp_path.glob("*.cwasm"))) == 1
    first.close()

    second = AgentEngine(cache_dir=tmp_path)  # a node restart: new engine, same cache
    again = second.load(wasm)
    assert (again.cache_hit, second.compiles) == (True, 0)
    assert again.sha256 == loaded.sha256
    assert second.load(wasm).cache_hit  # and once loaded, kept in memory
    second.close()


def test_python_component_loads_from_cache_in_milliseconds(built_agents):
    warm = AgentEngine(cache_dir=COMPILED_CACHE)
    warm.load(built_agents["hello"])  # compiles only if this session has not yet
    warm.close()
    engine = AgentEngine(cache_dir=COMPILED_CACHE)
    start = time.perf_counter()
    loaded = engine.load(built_agents["hello"])
    elapsed = time.perf_counter() - start
    engine.close()
    assert loaded.cache_hit and engine.compiles == 0
    assert elapsed < 0.5, f"cached load took {elapsed:.3f} s"


def test_corrupt_cache_entry_is_recompiled(built_agents, tmp_path):
    wasm = built_agents["bad_trap"]
    first = AgentEngine(cache_dir=tmp_path)
    first.load(wasm)
    first.close()  # its component maps the cache file: unmapped before the file is overwritten
    del first
    (cached,) = tmp_path.glob("*.cwasm")
    cached.write_bytes(b"not a compiled component")
    engine = AgentEngine(cache_dir=tmp_path)
    loaded = engine.load(wasm)
    assert not loaded.cache_hit and engine.compiles == 1
    assert cached.read_bytes() != b"not a compiled component"


def test_bad_component_puts_only_that_agent_in_error(built_agents, tmp_path):
    garbage = tmp_path / "garbage.wasm"
    garbage.write_bytes(b"\0asm\x0d\0\x01\0 this is not a component")
    core_module = tmp_path / "core.wasm"
    core_module.write_bytes(wasmtime.wat2wasm('(module (func (export "tick")))'))
    specs = [
        AgentSpec("garbage", garbage, tick_interval_ms=50),
        AgentSpec("core", core_module, tick_interval_ms=50),
        AgentSpec("missing", tmp_path / "nope.wasm", tick_interval_ms=50),
        AgentSpec("hello", built_agents["hello"], tick_interval_ms=50),
    ]
    with running(specs) as (runtime, hosts):
        wait_until(lambda: len(hosts["hello"].of_type("log")) >= 3)
        for name in ("garbage", "core", "missing"):
            errors = wait_until(lambda n=name: hosts[n].of_type("agent.errored"))
            assert errors[0]["kind"] == "load"
            (status,) = runtime.status(name)
            assert status.status == "error"
            assert status.last_error == errors[0]["error"]
        assert "nope.wasm" in hosts["missing"].of_type("agent.errored")[0]["error"]
        assert runtime.status("hello")[0].status in ("idle", "running")


def test_missing_component_starts_once_it_appears(built_agents, tmp_path):
    late = tmp_path / "late.wasm"
    with running([AgentSpec("late", late, tick_interval_ms=50)]) as (runtime, hosts):
        wait_until(lambda: hosts["late"].of_type("agent.errored"))
        late.write_bytes(Path(built_agents["hello"]).read_bytes())
        wait_until(lambda: hosts["late"].of_type("log"), timeout=20)
        (status,) = runtime.status("late")
        assert status.restart_count >= 1


def test_heap_bytes_is_the_measured_linear_memory(built_agents):
    specs = [
        AgentSpec("hello", built_agents["hello"], tick_interval_ms=50),
        AgentSpec("bomb", built_agents["bad_membomb"], tick_interval_ms=10_000, memory_limit_mb=24),
    ]
    regions_before = live_regions()
    with running(specs) as (runtime, hosts):
        wait_until(lambda: hosts["hello"].of_type("log"))
        hello = runtime.status("hello")[0]
        # CPython's initialised heap: whole 64 KiB wasm pages, in the megabytes.
        assert hello.heap_bytes % 65536 == 0 and 4 << 20 < hello.heap_bytes < 64 << 20
        error = wait_until(lambda: hosts["bomb"].of_type("agent.errored"))[0]
        # The bomb grew 1 MiB at a time up to the 24 MiB limit: the figure tracked it.
        assert error["kind"] == "memory"
        heap = int(re.search(r"heap (\d+) bytes", error["error"]).group(1))
        assert (24 << 20) - (1 << 20) < heap <= 24 << 20
    assert live_regions() == regions_before  # every store's memory was unmapped on stop


def test_a_compile_past_its_memory_limit_fails_that_component_only(built_agents, tmp_path):
    engine = AgentEngine(cache_dir=tmp_path, compile_limits=CompileLimits(memory_mb=256))
    with pytest.raises(CompileError) as raised:
        engine.load(built_agents["hello"])  # an 18 MB component needs far more than 256 MiB
    assert raised.value.failure == "memory" and "256 MiB" in str(raised.value)
    assert engine.load(built_agents["bad_trap"]).component is not None  # the next one compiles
    engine.close()
    assert [p.name.startswith(".compiling-") for p in tmp_path.iterdir()] == [False]


def test_a_compile_past_its_time_limit_is_killed(built_agents, tmp_path):
    engine = AgentEngine(cache_dir=tmp_path, compile_limits=CompileLimits(timeout_secs=0.5))
    start = time.monotonic()
    with pytest.raises(CompileError) as raised:
        engine.load(built_agents["hello"])
    assert raised.value.failure == "timeout" and "0.5 s" in str(raised.value)
    assert time.monotonic() - start < 20  # killed, not waited for (seconds on a loaded machine)
    engine.close()
    assert not list(tmp_path.iterdir())  # no artifact, no partial


def test_stopping_kills_a_running_compile_and_reports_no_fault(built_agents, tmp_path, monkeypatch):
    monkeypatch.setenv("AGENT_SECRET_PAYMENTS_API_KEY", "never-in-the-compiler")
    hosts = {"hello": MemoryHost("hello")}
    runtime = AgentRuntime(
        [AgentSpec("hello", built_agents["hello"])],
        lambda spec, _stopping: (hosts[spec.name],) * 2,
        RuntimeOptions(cache_dir=tmp_path),  # cold: hello must compile
    )
    runtime.start()
    wait_until(lambda: runtime.engine.compiler._running, 30, "a compile child running")
    (child,) = runtime.engine.compiler._running
    # the child gets the component's bytes, not the node's secrets
    assert b"never-in-the-compiler" not in Path(f"/proc/{child.pid}/environ").read_bytes()
    start = time.monotonic()
    runtime.stop(timeout=30)
    assert time.monotonic() - start < 10, "stop waited for the compile"
    assert child.poll() is not None  # the child is gone
    assert runtime.status("hello")[0].status == "stopped"
    assert not hosts["hello"].of_type("agent.errored")


@pytest.mark.parametrize("compiler", ["cranelift", "winch"])
def test_either_compiler_builds_the_same_sandbox_into_artifacts_of_its_own(
    built_agents, tmp_path, monkeypatch, compiler
):
    """Fuel, epoch deadlines and host calls are the engine's settings, not the compiler's:
    both hold them; their artifacts never stand in for each other's (docs/operations.md)."""
    other = {"cranelift": "winch", "winch": "cranelift"}[compiler]
    monkeypatch.setenv(COMPILER_ENV, other)
    first = AgentEngine(cache_dir=tmp_path)
    first.load(built_agents["bad_loop"])
    first.close()
    monkeypatch.setenv(COMPILER_ENV, compiler)
    engine = AgentEngine(cache_dir=tmp_path)
    assert not engine.load(built_agents["bad_loop"]).cache_hit  # the other's is not used
    assert len(list(tmp_path.glob("*.cwasm"))) == 2
    engine.close()
    specs = [
        AgentSpec("fuel", built_agents["bad_loop"], tick_interval_ms=50, fuel_per_tick=2_000_000),
        AgentSpec("deadline", built_agents["bad_loop"], tick_interval_ms=50, tick_timeout_ms=200),
        AgentSpec("counter", built_agents["wat_counter"], tick_interval_ms=20),
    ]
    with running(specs, cache_dir=tmp_path) as (_, hosts):
        wait_until(lambda: len(hosts["counter"].of_type("log")) >= 3)
        fuel = wait_until(lambda: hosts["fuel"].of_type("agent.errored"))[0]
        deadline = wait_until(lambda: hosts["deadline"].of_type("agent.errored"))[0]
    assert fuel["error"] == "fuel exhausted: used all 2000000 units of the run"
    assert deadline["error"] == "deadline exceeded: ran longer than 200 ms"
    assert [e["message"] for e in hosts["counter"].of_type("log")[:3]] == [
        "tick 1",
        "tick 2",
        "tick 3",
    ]


def test_a_compiler_the_node_does_not_know_is_refused_naming_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv(COMPILER_ENV, "llvm")
    with pytest.raises(ValueError, match=f"{COMPILER_ENV}='llvm': not a compiler"):
        AgentEngine(cache_dir=tmp_path)
