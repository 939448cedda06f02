"""Benchmarks of the WASM runtime, on real Python-built agents.

1. Tick overhead: the runtime's tick (worker loop, fuel and deadline, host → `tick` → one host
   call → hooks) next to a bare wasmtime call of `tick` on the same component, same run.
2. Cold start of N Python-built agents, without and then with the compiled-component cache.
3. Approval resume latency inside the runtime: from an operator's decision (an Event set on
   another thread) to the agent running again after `invoke` returned (p50/p99).
4. The same end to end in a node: from sending POST /api/v1/approvals/{id} to the moment
   `invoke` returns to the payer, i.e. its `action.performed` is committed: HTTP, the
   decision's durable append, the gate waking the agent's thread, the action's append.
5. `startup`: a real node (`python -m node run`) on examples/runtime.toml's 5 agents, on an
   empty compiled cache (cold) and then on the cache it filled (warm): the seconds from spawning
   the node to its first agent started and to all started (their `agent_started` events on
   GET /api/v1/events), and the node's RssAnon (/proc/PID/status) once all have started;
   `rss_cold_vs_warm` is cold ÷ warm (issue 29's target: at most 1.2).
6. `once`: recorded host calls (bench/calls_once.py): a spend's and an inference's cost with
   the call recorder ÷ today's path in the same run, the resume of a task with 100 recorded
   calls after kill -9, and journal bytes per recorded call.

Run: .venv/bin/python bench/runtime.py [--agents 10] [--seconds 2] [--approvals 200]
[--parts cold,tick,approval,e2e] (builds the agents first through scripts/build-agents; uses a
fresh compiled cache, so `cold` compiles every Python agent: about a minute on 2 cores).

`--base COMMIT [--rounds 3]`: the same parts for this tree and that commit side by side, each
tree running its own copy of this script in a child (the order alternating between rounds); the
figures are the medians, with `tick_ratio_base` and `tick_vs_base` (below 1: slower ticks).
`startup` is driven from this script for both trees (the base's copy may not have it): each
tree's own node, run from its own checkout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import wasmtime

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from node.ops.polling import until, wait_until  # noqa: E402
from node.runtime import AgentRuntime, AgentSpec, RuntimeOptions  # noqa: E402
from node.runtime.bindings import make_linker  # noqa: E402
from node.runtime.engine import AgentEngine  # noqa: E402
from node.runtime.hostapi import run_clock  # noqa: E402
from node.runtime.memhost import MemoryHost  # noqa: E402
from projections.approvals import Approvals  # noqa: E402

PYTHON_AGENTS = [
    "hello",
    "payer",
    "task_worker",
    "mcp_tools",
    "secrets_reader",
    "inference",
    "sandbox_probe",
    "once",
]


def build() -> dict[str, Path]:
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build-agents"), "--json"],
        check=True,
        capture_output=True,
        text=True,
    )
    return {k: Path(v) for k, v in json.loads(out.stdout).items()}


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def bench_tick(wasm: Path, cache: Path, seconds: float) -> dict[str, float]:
    engine = AgentEngine(cache_dir=cache)
    component = engine.load(wasm).component
    # Bare: one store, trivial host functions, call `tick` in a loop.
    host = MemoryHost("bare")
    host.log = lambda level, message: None  # type: ignore[method-assign]
    linker = make_linker(engine.engine, host, engine.epoch_interval_ms)
    store = wasmtime.Store(engine.engine)
    store.set_wasi(wasmtime.WasiConfig())
    store.set_fuel(1 << 62)
    store.set_epoch_deadline(1 << 40)
    run_clock().start(1 << 40)  # host calls re-arm the deadline from this run's budget
    instance = linker.instantiate(store, component)
    tick = instance.get_func(store, "tick")
    assert tick is not None
    for _ in range(50):
        tick(store)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        tick(store)
        n += 1
    bare_us = (time.perf_counter() - start) / n * 1e6
    del tick, instance
    store.close()
    engine.close()

    # Runtime: a worker ticking back to back (tick_interval_ms=0), MemoryHost recording.
    def factory(spec: AgentSpec, stopping: threading.Event) -> tuple[MemoryHost, MemoryHost]:
        h = MemoryHost(spec.name)
        return h, h

    runtime = AgentRuntime(
        [AgentSpec("hello", wasm, tick_interval_ms=0)], factory, RuntimeOptions(cache_dir=cache)
    )
    runtime.start()
    worker = runtime.worker("hello")
    wait_until(lambda: worker.status().runs >= 50, 120, "50 ticks", interval=0.01)
    runs0, start = worker.status().runs, time.perf_counter()
    time.sleep(seconds)
    runs1, elapsed = worker.status().runs, time.perf_counter() - start
    fuel = worker.status().fuel_consumed / max(1, runs1)
    runtime.stop()
    return {
        "bare_tick_us": bare_us,
        "runtime_tick_us": elapsed / (runs1 - runs0) * 1e6,
        "fuel_per_tick": fuel,
    }


def bench_cold_start(agents: dict[str, Path], count: int, cache: Path) -> dict[str, float]:
    names = [PYTHON_AGENTS[i % len(PYTHON_AGENTS)] for i in range(count)]
    specs = [
        AgentSpec(f"{name}-{i}", agents[name], tick_interval_ms=60_000)
        for i, name in enumerate(names)
    ]
    hosts: dict[str, MemoryHost] = {}

    def factory(spec: AgentSpec, stopping: threading.Event) -> tuple[MemoryHost, MemoryHost]:
        hosts[spec.name] = MemoryHost(spec.name)
        return hosts[spec.name], hosts[spec.name]

    start = time.perf_counter()
    runtime = AgentRuntime(specs, factory, RuntimeOptions(cache_dir=cache))
    runtime.start()
    wait_until(
        lambda: all(h.of_type("run.finished") for h in list(hosts.values())),
        600,
        "every agent ran once",
        interval=0.005,
    )
    elapsed = time.perf_counter() - start
    compiles = runtime.engine.compiles
    runtime.stop()
    return {"seconds": elapsed, "compiles": compiles, "distinct": len(set(names))}


def bench_approval(wasm: Path, cache: Path, rounds: int) -> dict[str, float]:
    decided = threading.Event()
    waiting = threading.Event()
    latencies: list[float] = []
    decided_at = [0.0]

    stopping = threading.Event()

    def decide(capability: str, request: str) -> str:
        waiting.set()
        while not decided.wait(0.05):
            if stopping.is_set():  # as a real host does: give up when the agent stops
                return "timeout"
        decided.clear()
        return "approve"

    host = MemoryHost("payer", capabilities={"spend"}, gated={"spend"}, decide=decide)
    original_state_set = host.state_set

    def state_set(key: str, value: str) -> None:  # the agent's first call after invoke returns
        if key == "next_invoice":
            latencies.append(time.perf_counter() - decided_at[0])
        original_state_set(key, value)

    host.state_set = state_set  # type: ignore[method-assign]

    def factory(spec: AgentSpec, stop: threading.Event) -> tuple[MemoryHost, MemoryHost]:
        nonlocal stopping
        stopping = stop
        return host, host

    runtime = AgentRuntime(
        [AgentSpec("payer", wasm, tick_interval_ms=0)], factory, RuntimeOptions(cache_dir=cache)
    )
    runtime.start()
    for _ in range(rounds):
        waiting.wait()
        waiting.clear()
        time.sleep(0.002)  # the operator thinks
        decided_at[0] = time.perf_counter()
        decided.set()
    wait_until(lambda: len(latencies) >= rounds, 60, "every resume", interval=0.001)
    runtime.stop()
    ms = [v * 1000 for v in latencies]
    return {"p50_ms": statistics.median(ms), "p99_ms": pct(ms, 99), "max_ms": max(ms)}


NODE_TOML = """
[node]
name = "bench"
listen = "127.0.0.1:{port}"
data_dir = "data"

[[auth.tokens]]
name = "operator"
token = "bench-operator-token-000001"
scopes = ["admin"]

[[agents]]
name = "payer"
component = "{wasm}"
tick_interval_ms = 1
[agents.capabilities]
spend = true
[agents.approval]
spend = true
timeout_secs = 60
"""


async def bench_approval_http(wasm: Path, cache: Path, rounds: int) -> dict[str, float]:
    import os
    import socket

    import aiohttp
    from aiohttp import web

    from node.api import a2a, approvals, grants
    from node.api import runtime as area
    from node.app import AREAS, build_app
    from node.config.load import load_config
    from node.context import CONTEXT
    from node.runtime.compiled_cache import COMPILED_CACHE_ENV

    os.environ[COMPILED_CACHE_ENV] = str(cache)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="bench-node-") as tmp:
        path = Path(tmp) / "runtime.toml"
        path.write_text(NODE_TOML.format(port=port, wasm=wasm))
        app = build_app(load_config(path))
        for extra in (approvals, grants, a2a, area):
            if extra not in AREAS:
                extra.setup(app)
        ctx = app[CONTEXT]
        resumed: list[float] = []
        ctx.store.add_commit_listener(
            lambda envs: [
                resumed.append(time.perf_counter())
                for e in envs
                if e.event.type == "action.performed"
            ]
        )
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        headers = {"Authorization": "Bearer bench-operator-token-000001"}
        latencies: list[float] = []
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}", headers=headers) as http:
            for i in range(rounds):
                pending = await until(  # the first waits for the agent's cold compile too
                    ctx.projections.get(Approvals).list,
                    600 if i == 0 else 60,
                    "a pending approval",
                    0.001,
                )
                await asyncio.sleep(0.002)  # the operator thinks
                before = len(resumed)
                start = time.perf_counter()
                async with http.post(
                    f"/api/v1/approvals/{pending[0].id}", json={"decision": "approve"}
                ) as response:
                    assert response.status == 200, await response.text()
                await until(lambda: len(resumed) > before, 60, "the agent resumed", 0.0005)  # noqa: B023
                latencies.append((resumed[before] - start) * 1000)
        await runner.cleanup()
    return {
        "p50_ms": statistics.median(latencies),
        "p99_ms": pct(latencies, 99),
        "max_ms": max(latencies),
    }


def rss_anon_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise RuntimeError(f"no RssAnon for {pid}")


def example_config(folder: Path, agents_dir: Path, port: int) -> Path:
    """examples/runtime.toml with its components in `agents_dir`, its data in `folder`."""
    text = (ROOT / "examples" / "runtime.toml").read_text()
    text = text.replace("../build/agents/", f"{agents_dir}/")
    text = text.replace("127.0.0.1:8080", f"127.0.0.1:{port}")
    path = folder / "runtime.toml"
    path.write_text(text.replace('data_dir = "data"', f'data_dir = "{folder / "data"}"'))
    return path


def run_node_start(tree: Path, cache: Path, folder: Path) -> dict[str, float]:
    """Start `tree`'s node on the example agents; time the agents' starts, read its RssAnon."""
    import os
    import socket

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    folder.mkdir(parents=True, exist_ok=True)
    config = example_config(folder, tree / "build" / "agents", port)
    names = [
        line.split('"')[1]
        for line in config.read_text().split("[[agents]]", 1)[1].splitlines()
        if line.startswith("name = ")
    ]
    env = {**os.environ, "PYTHONPATH": str(tree), "AGENT_NODE_COMPILED_CACHE": str(cache)}
    started: dict[str, float] = {}
    spawned = time.perf_counter()
    node = subprocess.Popen(
        [sys.executable, "-m", "node", "run", "--config", str(config)],
        cwd=tree,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(folder / "node.log").open("ab"),
    )
    headers = {"Authorization": "Bearer dev-admin-token-change-me"}
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers) as http:
            wait_until(
                lambda: http.get("/api/v1/health", timeout=2).status_code == 200,
                120,
                "the node answers",
                retry_on=(httpx.HTTPError,),
            )
            event = ""
            timeout = httpx.Timeout(10, read=900)
            # from position 0: agents that started before this subscription are in the backlog
            events = "/api/v1/events?last_event_id=0"
            with http.stream("GET", events, timeout=timeout) as stream:
                for line in stream.iter_lines():
                    if line.startswith("event:"):
                        event = line.split(":", 1)[1].strip()
                    elif line.startswith("data:") and event == "agent_started":
                        agent = json.loads(line.split(":", 1)[1])["agent"]
                        started.setdefault(agent, time.perf_counter() - spawned)
                        if set(names) <= set(started):
                            break
        time.sleep(2)  # settle: the first ticks, the allocator's trims
        rss = rss_anon_kb(node.pid)
    finally:
        node.terminate()
        node.wait(60)
    return {
        "first_s": min(started.values()),
        "all_s": max(started.values()),
        "rss_anon_mb": rss / 1024,
    }


def bench_startup(tree: Path, folder: Path) -> dict[str, float]:
    """A cold start (empty compiled cache), then a warm one on what it compiled."""
    cache = folder / "compiled"
    cold = run_node_start(tree, cache, folder / "cold")
    warm = run_node_start(tree, cache, folder / "warm")
    return {
        "cold_first_agent_s": round(cold["first_s"], 2),
        "cold_all_agents_s": round(cold["all_s"], 2),
        "warm_all_agents_s": round(warm["all_s"], 2),
        "rss_cold_mb": round(cold["rss_anon_mb"], 1),
        "rss_warm_mb": round(warm["rss_anon_mb"], 1),
        "rss_cold_vs_warm": round(cold["rss_anon_mb"] / warm["rss_anon_mb"], 2),
    }


def print_startup(figures: dict[str, float], label: str = "") -> None:
    print(
        f"startup{label}, 5 example agents: cold first {figures['cold_first_agent_s']:.1f} s, "
        f"all {figures['cold_all_agents_s']:.1f} s; warm all {figures['warm_all_agents_s']:.2f} s;"
        f" RssAnon cold {figures['rss_cold_mb']:.0f} MB, warm {figures['rss_warm_mb']:.0f} MB "
        f"(cold/warm {figures['rss_cold_vs_warm']:.2f})",
        flush=True,
    )


def against_base(args: argparse.Namespace) -> None:
    """Each tree's own bench in a child, alternating; medians of the rounds' figures."""
    from bench.common import export

    with tempfile.TemporaryDirectory(prefix="bench-runtime-base-") as tmp:
        base = export(args.base, Path(tmp))
        for built in ("build", ".cache"):  # the same agent sources: reuse the builds
            if (ROOT / built).exists():
                shutil.copytree(ROOT / built, base / built, dirs_exist_ok=True)
        parts = [p for p in args.parts.split(",") if p != "startup"]
        child = [
            "--parts", ",".join(parts), "--agents", str(args.agents),
            "--seconds", str(args.seconds), "--approvals", str(args.approvals),
        ]  # fmt: skip
        runs: dict[str, list[dict]] = {"this": [], "base": []}
        for i in range(args.rounds):
            for name, tree in (("this", ROOT), ("base", base))[:: 1 if i % 2 else -1]:
                figures: dict = {}
                if "startup" in args.parts.split(","):
                    figures = bench_startup(tree, Path(tmp) / f"startup-{name}-{i}")
                    print_startup(figures, f" ({name})")
                if not parts:
                    runs[name].append(figures)
                    continue
                out = subprocess.run(
                    [sys.executable, "bench/runtime.py", *child],
                    cwd=tree,
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                runs[name].append({**figures, **json.loads(out.strip().splitlines()[-1])})
                print(f"round {i + 1} {name}: {runs[name][-1]}", flush=True)

    def median(name: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[name] if key in r)

    figures: dict[str, object] = {"bench": "runtime", "base": args.base, "rounds": args.rounds}
    for key in runs["this"][0]:
        if key != "bench" and isinstance(runs["this"][0][key], int | float):
            figures[key] = median("this", key)
            if all(key in r for r in runs["base"]):
                figures[f"{key}_base"] = median("base", key)
    for key in ("cold_first_agent_s", "cold_all_agents_s"):
        if key in figures and f"{key}_base" in figures:
            figures[f"{key}_vs_base"] = round(
                float(figures[key]) / float(figures[f"{key}_base"]), 2
            )
    if "tick_ratio" in figures and "tick_ratio_base" in figures:
        figures["tick_vs_base"] = round(
            float(figures["tick_ratio"]) / float(figures["tick_ratio_base"]), 3
        )
    print(json.dumps(figures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--approvals", type=int, default=200)
    parser.add_argument("--parts", default="cold,tick,approval,e2e", help="and startup, once")
    parser.add_argument("--base", help="a commit to measure side by side")
    parser.add_argument("--rounds", type=int, default=3, help="with --base")
    parser.add_argument(
        "--compiled-cache",
        help="a warm compiled cache to load agents from (not with `cold`): on a loaded machine, "
        "a cold compile can outlast the parts' waits",
    )
    args = parser.parse_args()
    if args.base:
        against_base(args)
        return
    parts = set(args.parts.split(","))
    agents = build()
    figures: dict[str, object] = {"bench": "runtime"}
    with tempfile.TemporaryDirectory(prefix="bench-runtime-") as tmp:
        cache = Path(tmp)
        if args.compiled_cache:
            if "cold" in parts:
                parser.error("--compiled-cache measures no cold start: leave out `cold`")
            cache = Path(args.compiled_cache)
        if "startup" in parts:
            startup = bench_startup(ROOT, Path(tmp) / "startup")
            print_startup(startup)
            figures.update(startup)
        if "cold" in parts:
            cold = bench_cold_start(agents, args.agents, cache)
            warm = bench_cold_start(agents, args.agents, cache)
            print(f"cold start, {args.agents} agents ({cold['distinct']} distinct components):")
            print(
                f"  without compiled cache: {cold['seconds']:.2f} s ({cold['compiles']} compiles)"
            )
            print(
                f"  with compiled cache:    {warm['seconds']:.3f} s ({warm['compiles']} compiles)"
            )
            figures.update(
                agents=args.agents,
                cold_start_s=round(cold["seconds"], 2),
                cached_start_s=round(warm["seconds"], 3),
                cache_speedup=round(cold["seconds"] / warm["seconds"], 1),
            )
        if "tick" in parts:
            tick = bench_tick(agents["hello"], cache, args.seconds)
            print(
                f"tick (hello: tick -> host log + stdout line), {tick['fuel_per_tick']:.0f} fuel:"
            )
            print(f"  bare wasmtime call:     {tick['bare_tick_us']:.0f} us")
            print(
                f"  runtime tick:           {tick['runtime_tick_us']:.0f} us "
                f"(overhead {tick['runtime_tick_us'] - tick['bare_tick_us']:.0f} us)"
            )
            figures.update(
                bare_tick_us=round(tick["bare_tick_us"], 1),
                runtime_tick_us=round(tick["runtime_tick_us"], 1),
                tick_ratio=round(tick["bare_tick_us"] / tick["runtime_tick_us"], 2),
            )
        if "approval" in parts:
            approval = bench_approval(agents["payer"], cache, args.approvals)
            print(
                f"approval resume in the runtime ({args.approvals} rounds): "
                f"p50 {approval['p50_ms']:.3f} ms, p99 {approval['p99_ms']:.3f} ms, "
                f"max {approval['max_ms']:.3f} ms"
            )
            figures.update(
                resume_p50_ms=round(approval["p50_ms"], 3),
                resume_p99_ms=round(approval["p99_ms"], 3),
            )
        if "e2e" in parts:
            e2e = asyncio.run(bench_approval_http(agents["payer"], cache, args.approvals))
            print(
                f"approval end to end, POST decision -> invoke returns "
                f"({args.approvals} rounds): p50 {e2e['p50_ms']:.2f} ms, "
                f"p99 {e2e['p99_ms']:.2f} ms, max {e2e['max_ms']:.2f} ms"
            )
            figures.update(
                approval_e2e_p50_ms=round(e2e["p50_ms"], 2),
                approval_e2e_p99_ms=round(e2e["p99_ms"], 2),
            )
        if "once" in parts:
            from bench.calls_once import bench_cost, bench_resume

            once = {**bench_cost(agents["once"], cache), **bench_resume(agents["once"])}
            for key, value in once.items():
                print(f"  {key}: {value}")
            figures.update(once)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
