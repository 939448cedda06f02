"""Notifications from the outbox (docs/notifications.md): a real node process, a receiving
aiohttp server in this process.

(a) A2A push: from a task's change (its journal time) to the receiver's POST, p50/p99, beside
    the same changes as they reach an SSE client of /api/v1/a2a/events (the peer measured in
    the same run: what a client holding a stream open sees), as a ratio.
(b) kill -9: tasks with push configs are sent while the node delivers; the node is killed
    mid-way and started again; every notification of every acknowledged task must arrive
    (lost must be 0; duplicates are allowed: at least once).
(c) Approval notices: from `approval.requested` (its journal time) to the signed webhook's
    arrival at the receiver, p50/p99 (each request is approved once its notice arrives).

    PYTHONPATH=. .venv/bin/python bench/notifications.py [--tasks 200] [--approvals 50]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import tempfile
import time
from datetime import datetime
from pathlib import Path

import httpx
from aiohttp import web

from bench.common import ROOT, percentile, report
from harness.node import ADMIN_TOKEN, NodeProcess, auth, free_port, write_config

AGENTS_DIR = ROOT / "build" / "agents"
SECRET = "whsec_" + base64.b64encode(b"b" * 32).decode()
STATES = ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED")


def epoch(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


class Receiver:
    def __init__(self) -> None:
        self.arrivals: list[tuple[float, dict]] = []
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.arrivals.append((time.time(), json.loads(body)))
        return web.Response(status=204)

    async def start(self) -> web.AppRunner:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self.handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port).start()
        return runner


def node_config(directory: Path, receiver: Receiver, agents: str) -> Path:
    return write_config(
        directory,
        agents
        + f"""
[delivery]
allow_networks = ["127.0.0.0/8"]
backoff_initial_secs = 0.05
backoff_max_secs = 0.5

[notifications]
escalate_before_secs = 1

[[notifications.channels]]
name = "approvers"
kind = "webhook"
url = "{receiver.url}/approvals"
secret = "{SECRET}"
""",
    )


WORKER = f"""
[[agents]]
name = "worker"
component = "{AGENTS_DIR / "task_worker.wasm"}"
tick_interval_ms = 60000
"""
CASHIER = f"""
[[agents]]
name = "cashier"
component = "{AGENTS_DIR / "cashier.wasm"}"
tick_interval_ms = 60000
[agents.capabilities]
spend = true
[agents.approval]
spend = true
timeout_secs = 600
"""


def send(i: int, url: str) -> dict:
    return {
        "jsonrpc": "2.0",
        "id": i,
        "method": "SendMessage",
        "params": {
            "message": {"messageId": f"m{i}", "role": "ROLE_USER", "parts": [{"data": {"n": [i]}}]},
            "configuration": {
                "returnImmediately": True,
                "taskPushNotificationConfig": {"url": url},
            },
        },
    }


async def push_latency(node: NodeProcess, receiver: Receiver, tasks: int) -> dict:
    """(a): push arrival and SSE arrival of the same changes, measured from the journal time."""
    sse: dict[tuple[str, str], float] = {}
    names = {"task_created": STATES[0], "task_started": STATES[1], "task_completed": STATES[2]}

    async def follow(client: httpx.AsyncClient) -> None:
        async with client.stream("GET", "/api/v1/a2a/events") as stream:
            event = ""
            async for line in stream.aiter_lines():
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:") and event in names:
                    sse[(json.loads(line[5:])["id"], names[event])] = time.time()

    async with httpx.AsyncClient(
        base_url=node.url, headers=auth(ADMIN_TOKEN), timeout=httpx.Timeout(30, read=None)
    ) as client:
        follower = asyncio.ensure_future(follow(client))
        await asyncio.sleep(0.5)  # the stream is open
        start = len(receiver.arrivals)
        for i in range(tasks):
            await client.post("/a2a/worker", json=send(i, f"{receiver.url}/push"))
        await _until(lambda: len(receiver.arrivals) - start >= 3 * tasks, 120)
        follower.cancel()
    push, stream = [], []
    for arrived, body in receiver.arrivals[start:]:
        task = body["task"]
        changed = epoch(task["status"]["timestamp"])
        push.append(arrived - changed)
        seen = sse.get((task["id"], task["status"]["state"]))
        if seen is not None:
            stream.append(seen - changed)
    p50, p99 = percentile(push, 0.5), percentile(push, 0.99)
    s50 = percentile(stream, 0.5)
    return {
        "push_p50_ms": round(p50 * 1000, 2),
        "push_p99_ms": round(p99 * 1000, 2),
        "sse_p50_ms": round(s50 * 1000, 2),
        "sse_p99_ms": round(percentile(stream, 0.99) * 1000, 2),
        "push_p50_over_sse_p50": round(p50 / s50, 2) if s50 > 0 else None,
        "push_notifications": len(push),
    }


async def kill_9(node: NodeProcess, receiver: Receiver, tasks: int) -> dict:
    """(b): tasks sent while the node delivers; kill -9 half-way; every notification after."""
    start = len(receiver.arrivals)
    ids: list[str] = []
    async with httpx.AsyncClient(base_url=node.url, headers=auth(ADMIN_TOKEN)) as client:
        for i in range(tasks):
            answer = await client.post("/a2a/worker", json=send(i, f"{receiver.url}/crash"))
            ids.append(answer.json()["result"]["task"]["id"])
            if i == tasks // 2:
                killed_at = len(receiver.arrivals) - start
                node.kill()
                break
    node.start()
    await _until(lambda: _complete(receiver, start, ids), 120)
    seen = _per_task(receiver, start)
    lost = sum(len(set(STATES) - set(seen.get(t, ()))) for t in ids)
    arrived = len(receiver.arrivals) - start
    return {
        "kill9_tasks": len(ids),
        "kill9_delivered_before_kill": killed_at,
        "kill9_lost": lost,
        "kill9_duplicates": arrived - sum(len(set(v)) for v in seen.values()),
    }


def _per_task(receiver: Receiver, start: int) -> dict[str, list[str]]:
    seen: dict[str, list[str]] = {}
    for _, body in receiver.arrivals[start:]:
        task = body.get("task")
        if task:
            seen.setdefault(task["id"], []).append(task["status"]["state"])
    return seen


def _complete(receiver: Receiver, start: int, ids: list[str]) -> bool:
    seen = _per_task(receiver, start)
    return all(set(STATES) <= set(seen.get(t, ())) for t in ids)


async def approval_latency(node: NodeProcess, receiver: Receiver, count: int) -> dict:
    """(c): each payment's request → its signed webhook; approved once it arrived."""
    latencies = []
    async with httpx.AsyncClient(base_url=node.url, headers=auth(ADMIN_TOKEN)) as client:
        for i in range(count):
            before = len(receiver.arrivals)
            await client.post(
                "/a2a/cashier",
                json={
                    "jsonrpc": "2.0",
                    "id": i,
                    "method": "SendMessage",
                    "params": {
                        "message": {
                            "messageId": f"p{i}",
                            "role": "ROLE_USER",
                            "parts": [{"data": {"pay": {"invoice": f"INV-{i}"}}}],
                        },
                        "configuration": {"returnImmediately": True},
                    },
                },
            )
            await _until(lambda b=before: _notice(receiver, b) is not None, 30)
            arrived, body = _notice(receiver, before)  # type: ignore[misc]
            latencies.append(arrived - epoch(body["data"]["requested_at"]))
            await client.post(
                f"/api/v1/approvals/{body['data']['id']}", json={"decision": "approve"}
            )
    return {
        "approval_p50_ms": round(percentile(latencies, 0.5) * 1000, 2),
        "approval_p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
        "approval_notices": len(latencies),
    }


def _notice(receiver: Receiver, after: int) -> tuple[float, dict] | None:
    for arrived, body in receiver.arrivals[after:]:
        if body.get("type") == "approval.requested":
            return arrived, body
    return None


async def _until(predicate, timeout: float) -> None:
    from node.ops.polling import until

    await until(predicate, timeout, "the notifications")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--approvals", type=int, default=50)
    args = parser.parse_args()
    receiver = Receiver()
    runner = await receiver.start()
    figures: dict = {"bench": "notifications"}
    with tempfile.TemporaryDirectory() as tmp:
        node = NodeProcess(node_config(Path(tmp), receiver, WORKER + CASHIER))
        try:
            node.start(60)
            figures |= await push_latency(node, receiver, args.tasks)
            figures |= await kill_9(node, receiver, args.tasks)
            figures |= await approval_latency(node, receiver, args.approvals)
        finally:
            node.kill()
            await runner.cleanup()
    report(figures)


if __name__ == "__main__":
    asyncio.run(main())
