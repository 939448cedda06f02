"""Shared test helpers: configs with known tokens, and real node processes on free ports."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from node.config import Config
from node.config_load import load_config
from node.polling import DeadlineExceeded, wait_until

ROOT = Path(__file__).resolve().parent.parent
ADMIN_TOKEN = "test-admin-token-000000001"
READ_TOKEN = "test-read-token-0000000001"
OPERATE_TOKEN = "test-operate-token-0000001"
PUBLISH_TOKEN = "test-publish-token-0000001"


def auth(token: str = ADMIN_TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


_HANDED_OUT: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def free_port() -> int:
    """A port to listen on later, below the kernel's range for outgoing connections: a port
    from that range can be taken before the server binds it, by any client socket, or by a
    peer's connection to it that the kernel makes to itself (seen: a ten-node mesh whose last
    node could not bind). Never the same port twice in one process."""
    low = _ephemeral_low()
    for _ in range(200):
        if low > 12_000:
            port = random.randrange(10_000, low)
        else:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError("no free port found")


def write_config(
    directory: Path,
    extra: str = "",
    *,
    name: str = "node-a",
    port: int | None = None,
    node: str = "",
) -> Path:
    """A runtime.toml with one token per scope; `extra` is appended TOML, `node` more keys of
    its [node] table."""
    directory.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    path = directory / "runtime.toml"
    path.write_text(
        f"""
[node]
name = "{name}"
listen = "127.0.0.1:{port}"
data_dir = "data"
shutdown_drain_secs = 0.3
{node}

[[auth.tokens]]
name = "admin"
token = "{ADMIN_TOKEN}"
scopes = ["admin"]

[[auth.tokens]]
name = "reader"
token = "{READ_TOKEN}"
scopes = ["read"]

[[auth.tokens]]
name = "operator"
token = "{OPERATE_TOKEN}"
scopes = ["operate"]

[[auth.tokens]]
name = "publisher"
token = "{PUBLISH_TOKEN}"
scopes = ["publish"]
{extra}
"""
    )
    path.chmod(0o600)  # it holds plaintext tokens: `config check` refuses it readable by others
    return path


def make_config(directory: Path, extra: str = "", **kwargs) -> Config:
    return load_config(write_config(directory, extra, **kwargs))


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


class NodeProcess:
    """`python -m node run` in a subprocess: the real thing, killable with SIGKILL."""

    def __init__(
        self, config_path: Path, args: tuple[str, ...] = (), ca_file: Path | None = None
    ) -> None:
        self.config_path = config_path
        self.args = args  # more `agent-node run` flags (logging)
        self.config = load_config(config_path)
        scheme = "https" if self.config.node.tls_cert_file else "http"
        self.url = f"{scheme}://{self.config.node.listen}"
        # an https node's certificate is checked against `ca_file` (tests make their own CA)
        self.verify: ssl.SSLContext | bool = (
            ssl.create_default_context(cafile=str(ca_file)) if ca_file else True
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = config_path.parent / "node.log"
        self.root = ROOT  # the checkout whose node runs (a bench may run another's)
        self.preexec_fn: Callable[[], None] | None = None  # run in the child (setrlimit)

    @property
    def pid(self) -> int:
        assert self.proc is not None, "the node was not started"
        return self.proc.pid

    def start(self, timeout: float = 30) -> NodeProcess:
        if self.proc is not None and self.proc.poll() is None:
            # `with node.start():` would start a second node that nothing stops (issue 37)
            raise RuntimeError("this node is running already: use `with node:` or start()")
        log = open(self.log_path, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "node", "run", "--config", str(self.config_path), *self.args],
            cwd=self.root,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=self.preexec_fn,
        )
        log.close()

        def healthy() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"node exited early:\n{self.log_path.read_text()}")
            health = httpx.get(self.url + "/api/v1/health", timeout=1, verify=self.verify)
            return health.status_code == 200

        try:
            wait_until(healthy, timeout, "the node is healthy", retry_on=(httpx.HTTPError,))
        except DeadlineExceeded as e:
            raise DeadlineExceeded(
                f"{e.what}; its log:\n{self.log_path.read_text()}", timeout
            ) from None
        return self

    def kill(self) -> None:
        """SIGKILL: no chance to flush anything that was not already durable."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self, timeout: float = 30) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def client(self, token: str = ADMIN_TOKEN) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=auth(token), timeout=30, verify=self.verify)

    def __enter__(self) -> NodeProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()


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
def replicate(store, stream: str, type: str, data: dict, *, origin: str = "node-b"):
    """Import one event of `stream` signed by another node, as a mesh peer's push would.

    Returns a coroutine resolving to the import results; the journal's home becomes `origin`.
    """
    from nacl.signing import SigningKey

    from eventstore.envelope import Event, digest_of, encode_event, sign, utc_now
    from eventstore.store import ForeignEnvelope

    key = SigningKey(bytes([7]) * 32)
    head = store.head(stream)
    seq = head.seq + 1 if head else 1
    prev = head.payload_hash if head else ""
    payload = encode_event(Event(type=type, ts=utc_now(), origin=origin, prev=prev, data=data))
    signature = sign(key, stream, seq, digest_of(payload))
    return store.import_envelopes(
        [ForeignEnvelope(stream, seq, payload, signature)],
        lambda name: key.verify_key if name == origin else None,
    )


def tiny_component(path: Path | None = None) -> bytes:
    """A minimal valid WebAssembly component (with a core module), optionally written out."""
    import wasmtime

    wasm = bytes(
        wasmtime.wat2wasm(
            '(component (core module $m (func (export "f"))) (core instance $i (instantiate $m)))'
        )
    )
    if path is not None:
        path.write_bytes(wasm)
    return wasm
