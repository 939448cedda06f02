"""Inference through the node's client ÷ the same streamed call made directly (quick).

A local aiohttp server streams an OpenAI chat completion of N tokens (tests/llm_support.py);
each round makes the call directly (aiohttp, reading the SSE lines) and through
InferenceService.complete (the adapter, rate limits, metering, deltas), alternating which goes
first. Figures: time to first token and total time, their ratio, the first-token delay the
node adds (p50, p99); and the cost of the budget check per call (three budgets, in memory:
the ledger's LMDB reads are not counted). Last line: one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from node.config.inference import InferenceBudget, InferenceSection
from node.inference.budgets import InferenceBudgets
from node.inference.models import catalogue
from node.inference.request import parse
from node.inference.service import Call, InferenceService
from node.ops.metrics import NodeMetrics
from tests.llm_support import LLM, Reply

ROUNDS, TOKENS = 40, 200


class Clock:
    def __init__(self) -> None:
        self.first: float | None = None

    def text(self, token: str) -> None:
        if self.first is None:
            self.first = time.perf_counter()

    def tool_call(self, call_id: str, name: str) -> None: ...

    def tool_arguments(self, call_id: str, delta: str) -> None: ...


async def direct(session: aiohttp.ClientSession, url: str) -> tuple[float, float]:
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    start = time.perf_counter()
    first = None
    async with session.post(url + "/chat/completions", json=body) as response:
        while raw := await response.content.readuntil(b"\n"):
            line = raw.strip()
            if line == b"data: [DONE]":
                break
            if first is None and line.startswith(b"data:") and b'"content": "tok' in line:
                first = time.perf_counter()
    end = time.perf_counter()
    return (first or end) - start, end - start


async def through(service: InferenceService, call: Call) -> tuple[float, float]:
    clock = Clock()
    start = time.perf_counter()
    await service.complete(call, clock, 60.0)
    end = time.perf_counter()
    return (clock.first or end) - start, end - start


def p99(values: list[float]) -> float:
    return sorted(values)[int(len(values) * 0.99) - 1 if len(values) >= 100 else -1]


async def main() -> None:
    llm = LLM()
    llm.default = Reply(text=["tok "] * TOKENS)
    runner = web.AppRunner(llm.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    url = f"http://127.0.0.1:{port}/v1"
    section = InferenceSection(local_url=url)
    async with aiohttp.ClientSession() as session:
        service = InferenceService(session, section, NodeMetrics())
        model = catalogue(section)["local"]
        chat = parse('{"prompt": "hi"}')
        call = Call("bench", model, chat, model.max_tokens, chat.estimated_input_tokens())
        d_first: list[float] = []
        d_total: list[float] = []
        n_first: list[float] = []
        n_total: list[float] = []
        for i in range(ROUNDS):
            pair = [("d", direct(session, url)), ("n", through(service, call))]
            for kind, job in pair if i % 2 else reversed(pair):
                first, total = await job
                (d_first if kind == "d" else n_first).append(first)
                (d_total if kind == "d" else n_total).append(total)
    await runner.cleanup()
    added = [n - d for n, d in zip(n_first, d_first, strict=True)]
    budgets = InferenceBudgets(
        [
            InferenceBudget(rule=r)
            for r in (
                "tokens 1000000000 per day",
                "cost 1000 per month",
                "tokens 100000000 per hour for node",
            )
        ],
        None,
        {},
        ["bench"],
    )
    start, checks = time.perf_counter(), 20_000
    for _ in range(checks):
        budgets.check("bench", 100, 1000)
        budgets.settle("bench", 100, 1000)
    check_us = (time.perf_counter() - start) / checks * 1e6
    figures = {
        "tokens": TOKENS,
        "rounds": ROUNDS,
        "direct_total_ms": round(statistics.median(d_total) * 1000, 2),
        "node_total_ms": round(statistics.median(n_total) * 1000, 2),
        "total_ratio_direct_over_node": round(
            statistics.median(d_total) / statistics.median(n_total), 3
        ),
        "direct_first_token_ms": round(statistics.median(d_first) * 1000, 2),
        "node_first_token_ms": round(statistics.median(n_first) * 1000, 2),
        "first_token_added_p50_ms": round(statistics.median(added) * 1000, 2),
        "first_token_added_p99_ms": round(p99(added) * 1000, 2),
        "budget_check_and_settle_us": round(check_us, 2),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    asyncio.run(main())
