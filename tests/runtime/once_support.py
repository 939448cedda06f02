"""The far side of an agent's effects, for the tests of runs resumed after kill -9: a spend
receiver, a fetch target that holds its answer, and an OpenAI-compatible chat server, in one
aiohttp server on a thread of its own (the node under test is another process)."""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from harness.node import free_port
from node.ops.polling import until

ANSWER = "the answer is 42"


@dataclass
class Seen:
    """One request the receiver got: its JSON body (or text) and its Idempotency-Key."""

    path: str
    body: Any
    key: str | None


@dataclass
class Receiver:
    port: int = field(default_factory=free_port)
    seen: list[Seen] = field(default_factory=list)
    # the receiver holds its answer to these while `release` is not set: "/held" always, a
    # spend when its invoice is named in `hold_invoices` (the first time it arrives)
    hold_invoices: set[str] = field(default_factory=set)
    release: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def of(self, path: str) -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if s.path == path]

    def spends(self, invoice: str) -> list[Seen]:
        return [s for s in self.of("/spend") if s.body["request"].get("invoice") == invoice]

    def arm(self, *invoices: str) -> None:
        """Hold from now on: `/held` and the first spend of each of `invoices`."""
        self.release.clear()
        self.hold_invoices = set(invoices)

    async def _hold(self) -> None:
        # the server's own wait, not a test's sleep; a request held past a test is dropped
        await until(self.release.is_set, 600, "the test releases the held request")

    def _note(self, request: web.Request, body: Any) -> None:
        with self._lock:
            self.seen.append(Seen(request.path, body, request.headers.get("Idempotency-Key")))

    async def spend(self, request: web.Request) -> web.Response:
        body = await request.json()
        self._note(request, body)
        invoice = body["request"].get("invoice")
        if invoice in self.hold_invoices:
            self.hold_invoices.discard(invoice)
            await self._hold()
        return web.json_response({"paid": invoice})

    async def held(self, request: web.Request) -> web.Response:
        self._note(request, await request.text())
        await self._hold()
        return web.Response(text="fetched")

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self._note(request, await request.json())
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for word, finish in ((ANSWER, None), ("", "stop")):
            chunk = {"choices": [{"delta": {"content": word}, "finish_reason": finish}]}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        return response

    def start(self) -> Receiver:
        ready = threading.Event()

        def serve() -> None:
            loop = asyncio.new_event_loop()
            app = web.Application()
            app.router.add_post("/spend", self.spend)
            app.router.add_post("/held", self.held)
            app.router.add_post("/v1/chat/completions", self.chat)
            runner = web.AppRunner(app)
            loop.run_until_complete(runner.setup())
            loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
            self._loop, self._runner = loop, runner
            ready.set()
            loop.run_forever()

        threading.Thread(target=serve, name="once-receiver", daemon=True).start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        self.release.set()
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
