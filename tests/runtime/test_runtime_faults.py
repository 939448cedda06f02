"""Bad agents: limits hold, faults become errors with reasons, restarts back off, and
nothing a bad agent does stops the node or another agent."""

from __future__ import annotations

import socket
import threading
import time

from node.runtime import AgentRuntime, AgentSpec, RuntimeOptions
from node.runtime.memhost import MemoryHost
from tests.polling import wait_until
from tests.runtime_support import running


def _first_error(hosts: dict[str, MemoryHost], name: str) -> dict:
    return wait_until(lambda: hosts[name].of_type("agent.errored"))[0]


def test_fuel_exhaustion(built_agents):
    spec = AgentSpec(
        "loop",
        built_agents["bad_loop"],
        tick_interval_ms=50,
        fuel_per_tick=2_000_000,
        tick_timeout_ms=10_000,
    )
    with running([spec]) as (runtime, hosts):
        error = _first_error(hosts, "loop")
        assert error["kind"] == "fuel"
        assert error["error"] == "fuel exhausted: used all 2000000 units of the run"
        finished = hosts["loop"].of_type("run.finished")[0]
        assert finished["fuel"] == 2_000_000 and finished["error"] == error["error"]
        assert runtime.status("loop")[0].fuel_remaining == 0


def test_infinite_loop_hits_the_epoch_deadline(built_agents):
    spec = AgentSpec("loop", built_agents["bad_loop"], tick_interval_ms=50, tick_timeout_ms=200)
    with running([spec]) as (runtime, hosts):
        error = _first_error(hosts, "loop")
        assert error["kind"] == "deadline"
        assert error["error"] == "deadline exceeded: ran longer than 200 ms"
        took = hosts["loop"].of_type("run.finished")[0]["duration_ms"]
        assert 190 <= took < 1000
        (status,) = runtime.status("loop")
        assert status.status in ("error", "running", "idle")
        assert status.last_error == error["error"]


def test_memory_bomb_hits_the_store_limit(built_agents):
    spec = AgentSpec("bomb", built_agents["bad_membomb"], tick_interval_ms=50, memory_limit_mb=16)
    with running([spec]) as (_, hosts):
        error = _first_error(hosts, "bomb")
    assert error["kind"] == "memory"
    assert error["error"].startswith("memory limit of 16 MiB reached")
    assert "unreachable" in error["error"]


def test_trap_and_err_are_errors_with_reasons(built_agents):
    specs = [
        AgentSpec("trap", built_agents["bad_trap"], tick_interval_ms=50),
        AgentSpec("err", built_agents["bad_err"], tick_interval_ms=50),
    ]
    with running(specs) as (runtime, hosts):
        trap, err = _first_error(hosts, "trap"), _first_error(hosts, "err")
        assert trap["kind"] == "trap" and "out of bounds memory access" in trap["error"]
        assert err == {
            **err,
            "kind": "err",
            "error": "tick returned err: upstream refused the request",
        }
        wait_until(lambda: runtime.status("err")[0].restart_count >= 1)


def test_python_exception_reason_includes_its_traceback(built_agents):
    spec = AgentSpec("mcp_tools", built_agents["mcp_tools"], tick_interval_ms=60_000)
    with running([spec]) as (runtime, hosts):
        wait_until(lambda: hosts["mcp_tools"].of_type("agent.started"))
        future = runtime.worker("mcp_tools").submit(
            "tool", "crash", lambda inst: inst.call("call-tool", "crash", "{}")
        )
        assert future.exception(timeout=10) is not None
        error = _first_error(hosts, "mcp_tools")
    assert error["kind"] == "trap"
    # the agent's own error first, where it was raised; then the trap and the runtime's panic
    assert error["error"].startswith("RuntimeError: crash requested (app.py line ")
    assert error["error"].index("crash requested") < error["error"].index("panicked")
    stderr = [o["line"] for o in hosts["mcp_tools"].of_type("output") if o["stream"] == "stderr"]
    assert any("Traceback" in line for line in stderr)


def test_restarts_back_off_exponentially(built_agents):
    spec = AgentSpec("trap", built_agents["bad_trap"], tick_interval_ms=10)
    with running([spec], restart_backoff_ms=40, restart_backoff_max_ms=200) as (runtime, hosts):
        wait_until(lambda: len(hosts["trap"].of_type("agent.errored")) >= 5, timeout=5)
        errors = hosts["trap"].of_type("agent.errored")[:5]
        starts = hosts["trap"].of_type("agent.started")
        (status,) = runtime.status("trap")
    assert [e["retry_in_ms"] for e in errors] == [40, 80, 160, 200, 200]
    assert [s["restart_count"] for s in starts[:5]] == [0, 1, 2, 3, 4]
    for error, restart in zip(errors[1:4], starts[2:5], strict=True):
        waited_ms = (restart["ts"] - error["ts"]) * 1000
        assert error["retry_in_ms"] * 0.9 <= waited_ms < error["retry_in_ms"] + 150
    assert status.restart_count >= 4


def test_sandbox_denies_files_environment_and_sockets(built_agents):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.3)
    port = listener.getsockname()[1]
    host = MemoryHost("probe", state={"port": str(port)})
    spec = AgentSpec("probe", built_agents["sandbox_probe"], tick_interval_ms=100)
    try:
        with running([spec], {"probe": host}):
            wait_until(lambda: any(m["message"] == "probe done" for m in host.of_type("log")))
        try:
            listener.accept()
            connected = True
        except TimeoutError:
            connected = False
    finally:
        listener.close()
    messages = [m["message"] for m in host.of_type("log")]
    assert not connected
    assert not [m for m in messages if m.startswith("ESCAPED")] and not host.of_type("finding")
    assert "denied: open /etc/passwd: FileNotFoundError: No such file or directory" in messages
    assert "denied: environment is empty" in messages
    assert "denied: import socket: No module named 'socket'" in messages
    assert f"denied: tcp connect 127.0.0.1:{port}: ACCESS_DENIED" in messages


def test_one_bad_agent_never_stops_another(built_agents):
    specs = [
        AgentSpec("hello", built_agents["hello"], tick_interval_ms=50, fuel_per_tick=50_000_000),
        AgentSpec("loop", built_agents["bad_loop"], tick_interval_ms=10, tick_timeout_ms=300),
        AgentSpec("bomb", built_agents["bad_membomb"], tick_interval_ms=10, memory_limit_mb=64),
        AgentSpec("trap", built_agents["bad_trap"], tick_interval_ms=10),
        AgentSpec("err", built_agents["bad_err"], tick_interval_ms=10),
    ]
    with running(specs, restart_backoff_ms=20, restart_backoff_max_ms=100) as (runtime, hosts):
        wait_until(lambda: hosts["hello"].of_type("log"))
        start = time.monotonic()
        before = len(hosts["hello"].of_type("log"))
        time.sleep(1.5)
        ticks = len(hosts["hello"].of_type("log")) - before
        elapsed = time.monotonic() - start
        statuses = {s.name: s for s in runtime.status()}
    assert ticks >= 0.6 * elapsed / 0.05, f"hello ticked only {ticks} times in {elapsed:.1f} s"
    assert not hosts["hello"].of_type("agent.errored")
    assert statuses["hello"].restart_count == 0 and statuses["hello"].status != "error"
    for bad in ("loop", "bomb", "trap", "err"):
        assert hosts[bad].of_type("agent.errored"), bad
        assert statuses[bad].restart_count >= 1, bad


def test_stop_keeps_one_deadline_for_all_agents(tmp_path):
    # A load that does not return (a real compile child is killed at stop: see
    # test_stopping_kills_a_running_compile_and_reports_no_fault) must still not hold up the
    # stop past its one deadline; each load here blocks until released.
    specs = [AgentSpec(f"slow{i}", tmp_path / "never-read.wasm") for i in range(3)]
    hosts = {spec.name: MemoryHost(spec.name) for spec in specs}
    runtime = AgentRuntime(specs, lambda spec, _stopping: (hosts[spec.name],) * 2, RuntimeOptions())
    loading, released = threading.Semaphore(0), threading.Event()

    def load(path, on_phase=None):
        loading.release()
        released.wait(30)
        raise OSError("released")

    runtime.engine.load = load
    runtime.start()
    try:
        for _ in specs:
            assert loading.acquire(timeout=10)
        start = time.monotonic()
        runtime.stop(timeout=1.0)
        assert time.monotonic() - start < 2.0  # one second for all three, not one each
    finally:
        released.set()


def test_stop_ends_even_a_spinning_agent(built_agents):
    spec = AgentSpec("loop", built_agents["bad_loop"], tick_interval_ms=10, tick_timeout_ms=500)
    with running([spec]) as (runtime, hosts):
        wait_until(lambda: hosts["loop"].of_type("run.started"))
        start = time.monotonic()
        runtime.stop(timeout=5)
        assert time.monotonic() - start < 1.5
        assert runtime.status("loop")[0].status == "stopped"
        assert hosts["loop"].of_type("agent.stopped")
