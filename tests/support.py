"""Shared test helpers: SSE clients, the CLI in a subprocess, replicated events. The configs,
ports and node processes the benches need too are in harness/node.py, imported from here."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Awaitable
from pathlib import Path

import httpx

from harness.node import ADMIN_TOKEN as ADMIN_TOKEN
from harness.node import OPERATE_TOKEN as OPERATE_TOKEN
from harness.node import PUBLISH_TOKEN as PUBLISH_TOKEN
from harness.node import READ_TOKEN as READ_TOKEN
from harness.node import ROOT as ROOT
from harness.node import NodeProcess as NodeProcess
from harness.node import auth as auth
from harness.node import free_port as free_port
from harness.node import make_config as make_config
from harness.node import tiny_component as tiny_component
from harness.node import write_config as write_config
from projections.approvals import Verdict


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "node", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


@contextlib.contextmanager
def logs_on_failure(*paths: Path):
    """Print the tail of node logs when the block fails, so a flaky failure explains itself."""
    try:
        yield
    except BaseException:
        for path in paths:
            if path.exists():
                print(f"--- {path}\n{path.read_text()[-6000:]}")
        raise


class SseStream:
    """A real SSE client (httpx + httpx-sse) over HTTP; a reader task queues what arrives, so a
    read that times out loses nothing and leaves the connection usable."""

    def __init__(self, base_url: str, path: str, token: str = ADMIN_TOKEN, **headers: str):
        self.url = base_url.rstrip("/") + path
        self.headers = {**auth(token), **headers}
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(30, read=None))
        self.response: httpx.Response | None = None
        self.ended = False  # the server ended the stream (or the connection broke)
        self._queue = None
        self._reader = None

    async def __aenter__(self) -> SseStream:
        import asyncio

        from httpx_sse import EventSource

        request = self.client.build_request("GET", self.url, headers=self.headers)
        self.response = await self.client.send(request, stream=True)
        self._queue = asyncio.Queue()
        if self.response.status_code == 200:
            source = EventSource(self.response)
            self._reader = asyncio.create_task(self._read(source))
        return self

    async def _read(self, source) -> None:
        try:
            async for event in source.aiter_sse():
                self._queue.put_nowait(event)
        except httpx.HTTPError:
            pass
        finally:
            self.ended = True
            self._queue.put_nowait(None)

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        import asyncio

        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
                await self._reader
        if self.response is not None:
            with contextlib.suppress(httpx.HTTPError):
                await self.response.aclose()
        await self.client.aclose()

    async def next(self, timeout: float = 5.0, *, skip_keepalive: bool = True):
        """The next event (a httpx_sse.ServerSentEvent); TimeoutError if none comes,
        EOFError once the stream has ended."""
        import asyncio

        assert self._queue is not None and self._reader is not None, self.response
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            event = await asyncio.wait_for(self._queue.get(), left)
            if event is None:
                self._queue.put_nowait(None)
                raise EOFError("the stream ended")
            if not (skip_keepalive and event.event == "keepalive"):
                return event

    async def take(self, count: int, timeout: float = 5.0) -> list:
        return [await self.next(timeout) for _ in range(count)]


# ----------------------------------------------------------------- replicas and components
def replicate(
    store, stream: str, type: str, data: dict, *, origin: str = "node-b", ts: str | None = None
):
    """Import one event of `stream` signed by another node, as a mesh peer's push would
    (written at `ts`, by default now).

    Returns a coroutine resolving to the import results; the journal's home becomes `origin`.
    """
    from nacl.signing import SigningKey

    from eventstore.envelope import Event, digest_of, encode_event, sign, utc_now
    from eventstore.store import ForeignEnvelope

    key = SigningKey(bytes([7]) * 32)
    head = store.head(stream)
    seq = head.seq + 1 if head else 1
    prev = head.payload_hash if head else ""
    payload = encode_event(
        Event(type=type, ts=ts or utc_now(), origin=origin, prev=prev, data=data)
    )
    signature = sign(key, stream, seq, digest_of(payload))
    return store.import_envelopes(
        [ForeignEnvelope(stream, seq, payload, signature)],
        lambda name: key.verify_key if name == origin else None,
    )


async def outcome(asking: Awaitable[Verdict]) -> str:
    """The outcome alone of an approval gate's `ask`: "approve", "deny" or "timeout"."""
    return (await asking).outcome
