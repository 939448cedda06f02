"""Approval policies (issue 47, docs/approvals.md): what a ruling costs and what it saves.

(a) the policy set's evaluation of one request (µs: docs/approvals.md's example set, a payment
    it permits within its budget), beside Cedar's own call on the same request (its peer) and
    beside the gate's whole cost for that request: `ApprovalGate.ask` with the policy, one at a
    time, from the call to the verdict (the ruling, the budget's read, the request and the
    decision in one durable write);
(b) approvals decided per second through the policy (64 asks at a time, each permitted and
    journaled with its request) against through an operator's POST /api/v1/approvals/{id} (64
    decisions at a time over HTTP on requests already pending, from a client in another
    process), both until every waiting call has its verdict; and the node's CPU per decision
    in each (every thread of the node's process: the policy's includes journaling the request,
    the POST's does not, its request was journaled before; the client's CPU is not counted).

The node is the real app (build_app) on a loopback port in this process, with a fresh journal.
Run: .venv/bin/python bench/approval_policy.py [--requests 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import cedarpy
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import http_load, percentile, report
from harness.node import ADMIN_TOKEN, auth, free_port, write_config
from node.app import build_app
from node.config.load import load_config
from node.ops.polling import until
from node.policy.engine import evaluate
from node.policy.schema import request_context, time_context
from node.services.approvals import APPROVALS, ApprovalGate

ROOT = Path(__file__).resolve().parent.parent
CONCURRENCY = 64
REQUEST = json.dumps({"amount": 3, "payee": "acme-supplies", "invoice": "INV-0001"})
POLICY_TOML = """
[[auth.tokens]]
name = "finance"
token = "bench-finance-token-00001"
scopes = ["operate"]
groups = ["finance"]

[policy]
files = ["payments.cedar"]
timezone = "UTC"

[policy.requests.spend]
amount = "decimal"
payee = "String"
invoice = "String?"
"""


def example_policies(directory: Path) -> None:
    """The documented example set, with its budget raised out of the way and the office hours
    kept out (a bench runs at any hour: it measures the same evaluation)."""
    text = (ROOT / "examples/policies/payments.cedar").read_text()
    text = text.replace('@budget("amount 100 per day")', '@budget("amount 1000000000 per day")')
    text = text[: text.index("// Nothing is paid outside office hours")]
    (directory / "payments.cedar").write_text(text)


def evaluation_us(gate: ApprovalGate, samples: int) -> dict[str, float]:
    """µs per ruling, and per raw Cedar call on the same request (the engine's peer)."""
    policies = gate.policy.current
    now = datetime.now(UTC)
    started = time.perf_counter()
    for _ in range(samples):
        evaluate(policies, "payer", "spend", REQUEST, now)
    ruling = (time.perf_counter() - started) / samples * 1e6
    request = {
        "principal": {"type": "Agent", "id": "payer"},
        "action": {"type": "Action", "id": "spend"},
        "resource": {"type": "Capability", "id": "spend"},
        "context": {
            "request": request_context("spend", json.loads(REQUEST), policies.types["spend"]),
            "time": time_context(now, policies.zone),
        },
    }
    entities = cedarpy.Entities.from_json_str("[]")
    started = time.perf_counter()
    for _ in range(samples):
        cedarpy.is_authorized(request, policies.cedar, entities)
    raw = (time.perf_counter() - started) / samples * 1e6
    return {"ruling_us": ruling, "cedar_us": raw}


async def gate_cost_ms(gate: ApprovalGate, samples: int) -> list[float]:
    """The whole gate, one request at a time: call → verdict."""
    latencies = []
    for n in range(samples):
        started = time.perf_counter()
        verdict = await gate.ask("payer", "spend", _payment(n), None, None, policy=True)
        latencies.append((time.perf_counter() - started) * 1000)
        assert verdict.outcome == "approve", verdict
    return latencies


def _payment(n: int) -> str:
    return json.dumps({"amount": 3, "payee": "acme-supplies", "invoice": f"INV-{n:06d}"})


async def through_policy(gate: ApprovalGate, requests: int) -> tuple[float, float]:
    """Decisions per second, 64 asks at a time, each decided by the policy; and the node's
    CPU per decision (µs, every thread of this process)."""
    slots = asyncio.Semaphore(CONCURRENCY)

    async def one(n: int) -> None:
        async with slots:
            verdict = await gate.ask("bulk", "spend", _payment(n), None, None, policy=True)
            assert verdict.outcome == "approve", verdict

    started, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one(n) for n in range(requests)))
    cpu_us = (time.process_time() - cpu) / requests * 1e6
    return requests / (time.perf_counter() - started), cpu_us


def _post_decisions(url: str, ids: list[str], out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    """In a child process: POST approve on every id, 64 at a time; its own rate."""
    result = asyncio.run(
        http_load(
            url,
            concurrency=CONCURRENCY,
            requests=len(ids),
            body=lambda i: {"decision": "approve"},
            headers=auth(ADMIN_TOKEN),
            expect=200,
            url_of=lambda i: f"{url}/api/v1/approvals/{ids[i]}",
        )
    )
    out.put(result)


async def through_posts(gate: ApprovalGate, url: str, requests: int) -> dict[str, float]:
    """Decisions per second of an operator's POSTs on pending requests, until every waiting
    call has its verdict (the asks are journaled before the clock starts); and the node's CPU
    per decision (µs: this process, not the client's)."""
    before = {r.id for r in gate.projection.list()}
    waiting = [
        asyncio.create_task(gate.ask("people", "spend", _payment(n), 3600, None))
        for n in range(requests)
    ]
    await until(
        lambda: gate.projection.count >= len(before) + requests, 60, "the asks journaled", 0.01
    )
    ids = [r.id for r in gate.projection.list() if r.id not in before]
    context = multiprocessing.get_context("spawn")
    out: multiprocessing.Queue = context.Queue()  # type: ignore[type-arg]
    child = context.Process(target=_post_decisions, args=(url, ids, out))
    child.start()
    await asyncio.sleep(0)
    cpu = time.process_time()
    verdicts = await asyncio.gather(*waiting)
    cpu_us = (time.process_time() - cpu) / requests * 1e6
    result = await asyncio.get_running_loop().run_in_executor(None, out.get)
    child.join(30)
    assert all(v.outcome == "approve" for v in verdicts)
    return {
        "client_rate": result["requests_per_s"],
        "failures": result["failures"],
        "cpu_us": cpu_us,
    }


async def run(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-policy-") as tmp:
        directory = Path(tmp)
        example_policies(directory)
        port = free_port()
        config = load_config(write_config(directory, POLICY_TOML, port=port))
        app = build_app(config)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", port)
        await site.start()
        url = f"http://127.0.0.1:{port}"
        gate = app[APPROVALS]
        rounds: list[dict[str, float]] = []
        try:
            for _ in range(args.rounds):
                costs = evaluation_us(gate, args.samples)
                latencies = await gate_cost_ms(gate, args.sequential)
                policy_rate, policy_cpu = await through_policy(gate, args.requests)
                posts = await through_posts(gate, url, args.requests)
                rounds.append(
                    {
                        **costs,
                        "gate_p50_ms": percentile(latencies, 0.5),
                        "gate_p99_ms": percentile(latencies, 0.99),
                        "policy_per_s": policy_rate,
                        "post_per_s": posts["client_rate"],
                        "policy_cpu_us": policy_cpu,
                        "post_cpu_us": posts["cpu_us"],
                        "post_failures": posts["failures"],
                    }
                )
                print(json.dumps({k: round(v, 2) for k, v in rounds[-1].items()}), flush=True)
        finally:
            await runner.cleanup()
    median = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    return {
        "bench": "approval_policy",
        "ruling_us": round(median["ruling_us"], 1),
        "cedar_call_us": round(median["cedar_us"], 1),
        "ruling_over_cedar": round(median["ruling_us"] / median["cedar_us"], 2),
        "gate_p50_ms": round(median["gate_p50_ms"], 2),
        "gate_p99_ms": round(median["gate_p99_ms"], 2),
        "ruling_share_of_gate": round(median["ruling_us"] / (median["gate_p50_ms"] * 1000), 3),
        "decided_per_s_policy": round(median["policy_per_s"]),
        "decided_per_s_post": round(median["post_per_s"]),
        "policy_over_post": round(median["policy_per_s"] / median["post_per_s"], 2),
        "node_cpu_us_per_decision_policy": round(median["policy_cpu_us"]),
        "node_cpu_us_per_decision_post": round(median["post_cpu_us"]),
        "post_failures": int(median["post_failures"]),
        "requests": args.requests,
        "rounds": args.rounds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000, help="approvals per throughput run")
    parser.add_argument("--sequential", type=int, default=300, help="asks timed one at a time")
    parser.add_argument("--samples", type=int, default=5000, help="rulings timed")
    parser.add_argument("--rounds", type=int, default=3)
    report(asyncio.run(run(parser.parse_args())))


if __name__ == "__main__":
    main()
