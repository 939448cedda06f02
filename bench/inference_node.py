"""A streamed inference through a whole node (a real `python -m node run` process, over HTTP)
÷ the same call made directly to the same local server (issue 54's figures).

A local aiohttp server streams an OpenAI chat completion of N tokens (tests/llm_support.py),
at full speed (`gap 0`: the node's fixed costs weigh most) and at one token per `--gap-ms`
(a model's pace). Each round either reads that stream directly (aiohttp, the SSE lines) or
asks the node: a task for the once agent (agents/once) whose run makes one `infer`, the time
taken from sending POST /api/v1/a2a/tasks to the first `token` event on the agent's SSE
stream (GET /api/v1/agents/stream) and to its `task_completed` there (the answer journaled
with its record, the task completed); the two kinds alternate which goes first. The first
token's delay is also counted from the task's `task_started` on the same stream (the task's
two durable writes, its creation and its start, are then behind it: what is left is the run,
the `infer` call and the streaming), less the direct call's first token.

The budget check's cost per call: what InferenceService.reserve and .settle do (the uses
before the call, `check`, `settle`, `crossed`) with three budgets (the agent's, the node's, a
month's cost) on the real ledger (projections/inference_ledger.py on LMDB, holding 2,000
charges of the last hour): the cost each call pays on the event loop.

Run: .venv/bin/python bench/inference_node.py [--rounds 30] [--tokens 200] [--gap-ms 1].
Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.inference import direct, p99  # noqa: E402
from harness.node import ADMIN_TOKEN, NodeProcess, auth, write_config  # noqa: E402
from node.config.inference import InferenceBudget  # noqa: E402
from node.inference.budgets import InferenceBudgets  # noqa: E402
from tests.llm_support import LLM, Reply  # noqa: E402

NODE_TOML = """
[[agents]]
name = "once"
component = "{wasm}"
tick_interval_ms = 600000
[agents.capabilities]
inference = true

[inference]
local_url = "{url}"
"""


class Stream:
    """The agent's SSE stream, read in the background: (event, data, arrival) in order."""

    def __init__(self) -> None:
        self.events: asyncio.Queue[tuple[str, dict[str, Any], float]] = asyncio.Queue()

    async def read(self, session: aiohttp.ClientSession, url: str) -> None:
        event = ""
        async with session.get(url, headers=auth(ADMIN_TOKEN)) as response:
            assert response.status == 200, await response.text()
            async for raw in response.content:
                line = raw.decode().rstrip("\n")
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:") and event:
                    data = json.loads(line[5:])
                    self.events.put_nowait((event, data, time.perf_counter()))
                elif not line:
                    event = ""

    async def until(self, name: str, timeout: float = 60) -> tuple[dict[str, Any], float]:
        deadline = time.perf_counter() + timeout
        while True:
            left = deadline - time.perf_counter()
            event, data, at = await asyncio.wait_for(self.events.get(), max(left, 0.001))
            if event == name or data.get("type") == name:
                return data, at


async def through_node(
    session: aiohttp.ClientSession, node_url: str, stream: Stream
) -> tuple[float, float, float]:
    while not stream.events.empty():  # what the previous round left
        stream.events.get_nowait()
    body = {"from": "bench", "to": "once", "input": {"steps": [{"infer": "hi"}]}}
    start = time.perf_counter()
    async with session.post(
        node_url + "/api/v1/a2a/tasks", json=body, headers=auth(ADMIN_TOKEN)
    ) as response:
        assert response.status in (200, 201), await response.text()
    _, started = await stream.until("task_started")  # journaled: its run goes on
    _, first = await stream.until("token")
    _, end = await stream.until("task_completed")  # SSE names: dots become _
    return first - start, end - start, first - started


async def measure(wasm: Path, rounds: int, tokens: int, gap: float) -> dict[str, float]:
    llm = LLM()
    llm.default = Reply(text=["tok "] * tokens, gap=gap, output_tokens=tokens)
    runner = web.AppRunner(llm.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    url = f"http://127.0.0.1:{port}/v1"
    times: dict[str, list[tuple[float, ...]]] = {"d": [], "n": []}
    with tempfile.TemporaryDirectory(prefix="bench-infer-node-") as tmp:
        node = NodeProcess(write_config(Path(tmp), NODE_TOML.format(wasm=wasm, url=url)))
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, node.start)
        try:
            async with aiohttp.ClientSession() as session:
                stream = Stream()
                reader = asyncio.create_task(
                    stream.read(session, node.url + "/api/v1/agents/stream?agent=once")
                )
                await asyncio.sleep(0.2)  # subscribed
                for i in range(rounds + 2):  # the first two warm up
                    pair = [
                        ("d", direct(session, url)),
                        ("n", through_node(session, node.url, stream)),
                    ]
                    for kind, job in pair if i % 2 else reversed(pair):
                        result = await job
                        if i >= 2:
                            times[kind].append(result)
                reader.cancel()
        finally:
            await loop.run_in_executor(None, node.kill)
    await runner.cleanup()
    d_first, d_total = (list(x) for x in zip(*times["d"], strict=True))
    n_first, n_total, n_run = (list(x) for x in zip(*times["n"], strict=True))
    added = [n - d for n, d in zip(n_first, d_first, strict=True)]
    in_run = [n - d for n, d in zip(n_run, d_first, strict=True)]
    return {
        "direct_total_ms": round(statistics.median(d_total) * 1000, 2),
        "node_total_ms": round(statistics.median(n_total) * 1000, 2),
        "total_ratio_direct_over_node": round(
            statistics.median(d_total) / statistics.median(n_total), 3
        ),
        "direct_first_token_ms": round(statistics.median(d_first) * 1000, 2),
        # the peer's own tail: the machine's noise, which the node's p99 below carries too
        "direct_first_token_p99_ms": round(p99(d_first) * 1000, 2),
        "node_first_token_ms": round(statistics.median(n_first) * 1000, 2),
        "first_token_added_p50_ms": round(statistics.median(added) * 1000, 2),
        "first_token_added_p99_ms": round(p99(added) * 1000, 2),
        "first_token_added_after_task_start_p50_ms": round(statistics.median(in_run) * 1000, 2),
        "first_token_added_after_task_start_p99_ms": round(p99(in_run) * 1000, 2),
    }


def budget_check_cost(calls: int = 5000) -> float:
    """µs per call of the budgets' work (uses before, check, settle, crossed: what
    InferenceService.reserve and .settle do) with three budgets on the real ledger."""
    from projections import catalogue as c
    from projections.disk import DiskModels
    from projections.inference_ledger import InferenceLedger
    from tests.projections.envelopes import START, Journal, ts_at

    disk = DiskModels([InferenceLedger()]).scratch()
    journal = Journal()
    now = time.time()
    for i in range(2000):
        charge = c.InferenceCompleted(
            route="local", model="local", input_tokens=10, output_tokens=20, cost_nanos=1000
        )
        ts = ts_at(now - 3600 + i - START.timestamp())  # the last hour's charges
        journal.add("bench", *c.event_of(charge), ts=ts)
    disk.fold_own(journal.envelopes)
    ledger = disk.get(InferenceLedger)
    rules = (
        "tokens 1000000000 per day",
        "tokens 100000000 per hour for node",
        "cost 1000 per month",
    )
    budgets = InferenceBudgets(
        [InferenceBudget(rule=r) for r in rules], ledger, {}, ["bench", "other"]
    )
    start = time.perf_counter()
    for _ in range(calls):  # what InferenceService.reserve and .settle do per call
        before = budgets.uses("bench")
        assert budgets.check("bench", 100, 1000) is None
        budgets.settle("bench", 100, 1000)
        budgets.crossed("bench", before)
    cost = (time.perf_counter() - start) / calls * 1e6
    disk.close()
    return cost


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--gap-ms", type=float, default=1.0)
    args = parser.parse_args()
    import os

    from bench.runtime import build
    from node.runtime.compiled_cache import COMPILED_CACHE_ENV
    from tests.runtime_support import COMPILED_CACHE

    os.environ.setdefault(COMPILED_CACHE_ENV, str(COMPILED_CACHE))  # the suite's warm cache
    wasm = build()["once"]
    figures: dict[str, Any] = {"bench": "inference_node", "tokens": args.tokens}
    for label, gap in (("full_speed", 0.0), (f"gap_{args.gap_ms:g}ms", args.gap_ms / 1000)):
        measured = asyncio.run(measure(wasm, args.rounds, args.tokens, gap))
        for key, value in measured.items():
            print(f"  {label} {key}: {value}", file=sys.stderr)
            figures[f"{label}_{key}"] = value
    figures["budget_check_and_settle_us"] = round(budget_check_cost(), 2)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
