"""Recorded host calls (docs/agents.md, "When a node dies mid-run"): what they cost, how fast a
cut run resumes, how much journal they take. Part `once` of bench/runtime.py.

1. An effectful call's cost, recorded ÷ today's, in one run: a node in this process runs the
   once agent (agents/once) on a task of N spends (an action POSTed to a local aiohttp
   receiver) and one of N inferences (a local OpenAI-compatible stream), once with the
   recorder and once with today's path (perform, then journal `action.performed` /
   `inference.completed` alone: the host of e3acfc7), alternating; a call's time is the gap
   between two consecutive calls' commits (median).
2. Resume: a real node process (`python -m node run`) runs a task of 100 spends and a fetch the
   receiver holds; killed with SIGKILL there and started again, the seconds from the new
   instance's `agent.started` to the task's `task.completed` (100 calls replayed, the fetch made
   live), beside the first run's 100 live spends.
3. Journal bytes per recorded call: the stored envelopes (payload and signature) of that run's
   `call.recorded` events, and with its `run.opened`/`run.closed` shared out.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from node.ops.polling import until

STEPS = 60
RUNS = 40  # tasks of one call each


class TodayRecorder:
    """The host of e3acfc7, as a recorder: perform, then journal the call's own event alone."""

    def __init__(self, agent: str, store: Any, stopping: Any, redact: Any, *_: Any) -> None:
        self.agent, self.store, self.redact = agent, store, redact

    resuming = False

    def reset(self) -> None: ...

    def run_started(self, run: Any) -> None: ...

    def run_finished(self, run: Any, faulted: bool = False) -> None: ...

    def call(self, call: str, target: str, request: str, perform: Callable[[Any], str]) -> str:
        from node.runtime.callrecords import CallContext

        context = CallContext(None, None)
        try:
            result = perform(context)
            for type_, data in context.events:
                self.store.append_blocking(self.agent, type_, self.redact(data))
        finally:
            context._written()  # an inference's budget reservation ends, as on today's path
        return result


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _receiver_app(held: threading.Event) -> Any:
    from aiohttp import web

    async def spend(request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"paid": body["request"].get("invoice")})

    async def hold(request: web.Request) -> web.Response:
        await until(held.is_set, 600, "the bench releases the held fetch", interval=0.01)
        return web.Response(text="fetched")

    async def chat(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for word, finish in (("the answer", None), ("", "stop")):
            chunk = {"choices": [{"delta": {"content": word}, "finish_reason": finish}]}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        return response

    app = web.Application()
    app.router.add_post("/spend", spend)
    app.router.add_post("/held", hold)
    app.router.add_post("/v1/chat/completions", chat)
    return app


AGENT_TOML = """
[[agents]]
name = "once"
component = "{wasm}"
tick_interval_ms = 60000
[agents.capabilities]
spend = true
http_fetch = true
inference = true
[agents.http]
allow_hosts = ["127.0.0.1:{port}"]

[actions.spend]
url = "http://127.0.0.1:{port}/spend"

[inference]
local_url = "http://127.0.0.1:{port}/v1"
"""


def _steps(kind: str, count: int) -> list[dict[str, Any]]:
    if kind == "spend":
        return [
            {"spend": {"amount": 1, "payee": "acme", "invoice": f"I-{i}"}} for i in range(count)
        ]
    return [{"infer": f"question {i}"} for i in range(count)]


async def _one_variant(wasm: Path, cache: Path, port: int, recorded: bool) -> dict[str, float]:
    """Per-call milliseconds of spends and inferences on an in-process node."""
    import os

    import aiohttp
    from aiohttp import web

    import node.runtime.host as host_module
    from harness.node import ADMIN_TOKEN, auth, write_config
    from node.api import runtime as area
    from node.app import AREAS, build_app
    from node.config.load import load_config
    from node.context import CONTEXT
    from node.ops.polling import until
    from node.runtime.callrecords import CallRecorder
    from node.runtime.compiled_cache import COMPILED_CACHE_ENV

    os.environ[COMPILED_CACHE_ENV] = str(cache)
    host_module.CallRecorder = CallRecorder if recorded else TodayRecorder  # type: ignore[misc]
    node_port = _port()
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-once-") as tmp:
        path = write_config(Path(tmp), AGENT_TOML.format(wasm=wasm, port=port), port=node_port)
        app = build_app(load_config(path))
        if area not in AREAS:
            area.setup(app)
        ctx = app[CONTEXT]
        commits: dict[str, list[float]] = {"action.performed": [], "inference.completed": []}

        def on_commit(envelopes: list[Any]) -> None:
            now = time.perf_counter()
            for e in envelopes:
                if e.event.type in commits:
                    commits[e.event.type].append(now)

        ctx.store.add_commit_listener(on_commit)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", node_port).start()
        try:
            async with aiohttp.ClientSession(
                f"http://127.0.0.1:{node_port}", headers=auth(ADMIN_TOKEN)
            ) as http:
                for kind, event in (
                    ("spend", "action.performed"),
                    ("infer", "inference.completed"),
                ):
                    body = {"from": "bench", "to": "once", "input": {"steps": _steps(kind, STEPS)}}
                    async with http.post("/api/v1/a2a/tasks", json=body) as response:
                        assert response.status in (200, 201), await response.text()
                    await until(
                        lambda e=event: len(commits[e]) >= STEPS, 120, f"{kind} calls", 0.005
                    )
                    times = commits[event]
                    gaps = [(b - a) * 1000 for a, b in itertools.pairwise(times)]
                    out[f"{kind}_ms"] = statistics.median(gaps[2:])  # the first few warm up
                    # runs of one call each (a tick's shape): the run's framing counts too
                    one = {"from": "bench", "to": "once", "input": {"steps": _steps(kind, 1)}}
                    for _ in range(RUNS):
                        async with http.post("/api/v1/a2a/tasks", json=one) as response:
                            assert response.status in (200, 201), await response.text()
                    await until(
                        lambda e=event: len(commits[e]) >= STEPS + RUNS, 120, f"{kind} runs", 0.005
                    )
                    gaps = [(b - a) * 1000 for a, b in itertools.pairwise(commits[event][STEPS:])]
                    out[f"{kind}_run_ms"] = statistics.median(gaps[2:])
        finally:
            await runner.cleanup()
    return out


def bench_cost(wasm: Path, cache: Path, rounds: int = 3) -> dict[str, float]:
    held = threading.Event()
    held.set()
    port = _port()
    loop = asyncio.new_event_loop()
    threading.Thread(target=_serve, args=(loop, _receiver_app(held), port), daemon=True).start()
    runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for i in range(rounds):
        for recorded in (True, False)[:: 1 if i % 2 else -1]:
            runs[recorded].append(asyncio.run(_one_variant(wasm, cache, port, recorded)))
    figures: dict[str, float] = {}
    for kind in ("spend", "infer"):
        this = statistics.median(r[f"{kind}_ms"] for r in runs[True])
        today = statistics.median(r[f"{kind}_ms"] for r in runs[False])
        run = statistics.median(r[f"{kind}_run_ms"] for r in runs[True])
        run_today = statistics.median(r[f"{kind}_run_ms"] for r in runs[False])
        figures.update(
            {
                f"once_{kind}_call_ms": round(this, 3),
                f"once_{kind}_call_today_ms": round(today, 3),
                f"once_{kind}_cost_ratio": round(this / today, 2),
                f"once_{kind}_run_of_one_call_ms": round(run, 3),
                f"once_{kind}_run_of_one_call_today_ms": round(run_today, 3),
                f"once_{kind}_run_of_one_call_ratio": round(run / run_today, 2),
            }
        )
    loop.call_soon_threadsafe(loop.stop)
    return figures


def _serve(loop: asyncio.AbstractEventLoop, app: Any, port: int) -> None:
    from aiohttp import web

    asyncio.set_event_loop(loop)
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    loop.run_forever()


def _ts(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(event["ts"]).timestamp()


def bench_resume(wasm: Path, calls: int = 100) -> dict[str, float]:
    """Kill -9 a real node inside a task of `calls` recorded spends; time its resume."""
    from harness.node import NodeProcess, write_config
    from node.ops.polling import wait_until

    held = threading.Event()
    port = _port()
    loop = asyncio.new_event_loop()
    threading.Thread(target=_serve, args=(loop, _receiver_app(held), port), daemon=True).start()
    with tempfile.TemporaryDirectory(prefix="bench-once-resume-") as tmp:
        path = write_config(Path(tmp), AGENT_TOML.format(wasm=wasm, port=port))
        node = NodeProcess(path).start()
        steps = [*_steps("spend", calls), {"fetch": f"http://127.0.0.1:{port}/held"}]
        with node.client() as client:
            body = {"from": "bench", "to": "once", "input": {"steps": steps}}
            assert client.post("/api/v1/a2a/tasks", json=body).status_code in (200, 201)
        wait_until(lambda: len(_events(node, "call.recorded")) >= calls, 120, "the spends")
        node.kill()
        held.set()
        node = NodeProcess(path).start()
        try:
            wait_until(lambda: _events(node, "task.completed"), 120, "the resumed task completes")
            journal = _events(node)
        finally:
            node.kill()
    loop.call_soon_threadsafe(loop.stop)
    first_start, restart = [
        e for e in journal if e["type"] in ("agent.started", "agent.restarted")
    ][:2]
    done = next(e for e in journal if e["type"] == "task.completed")
    spends = [e for e in journal if e["type"] == "call.recorded"]
    live_s = _ts(spends[calls - 1]) - _ts(next(e for e in journal if e["type"] == "run.opened"))
    records = [e["bytes"] for e in journal if e["type"] == "call.recorded"]
    framing = sum(e["bytes"] for e in journal if e["type"] in ("run.opened", "run.closed"))
    assert restart["seq"] > first_start["seq"]
    return {
        "once_resume_100_calls_s": round(_ts(done) - _ts(restart), 3),
        "once_first_run_100_calls_s": round(live_s, 3),
        "once_record_bytes": round(statistics.mean(records)),
        "once_bytes_per_call": round((sum(records) + framing) / len(records)),
    }


def _events(node: Any, type_: str | None = None) -> list[dict[str, Any]]:
    """The agent's journal on `node`: type, ts, seq and stored bytes of each envelope."""
    from eventstore.envelope import decode_event

    out: list[dict[str, Any]] = []
    with node.client() as client:
        while True:
            params: dict[str, Any] = {"agent": "once", "since": len(out), "limit": 1000}
            page = client.get("/api/v1/sync/envelopes/pushed", params=params).json()["envelopes"]
            for e in page:
                payload = base64.b64decode(e["payload"])
                event = decode_event(payload)
                size = len(payload) + 64  # the ed25519 signature
                out.append({"seq": e["seq"], "type": event.type, "ts": event.ts, "bytes": size})
            if len(page) < 1000:
                break
    return [e for e in out if type_ is None or e["type"] == type_]
