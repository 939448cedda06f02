"""Real nodes: configs with one known token per scope, free ports, and `python -m node run`
in a subprocess (`NodeProcess`)."""

from __future__ import annotations

import os
import random
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from node.config.load import load_config
from node.config.model import Config
from node.ops.polling import DeadlineExceeded, wait_until

ROOT = Path(__file__).resolve().parent.parent  # the checkout
ADMIN_TOKEN = "test-admin-token-000000001"
READ_TOKEN = "test-read-token-0000000001"
OPERATE_TOKEN = "test-operate-token-0000001"
PUBLISH_TOKEN = "test-publish-token-0000001"


def auth(token: str = ADMIN_TOKEN) -> dict[str, str]:
    """The headers of a call with `token`."""
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


def make_config(directory: Path, extra: str = "", **kwargs: Any) -> Config:
    """`write_config`, loaded."""
    return load_config(write_config(directory, extra, **kwargs))


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
        self.env_without: tuple[str, ...] = ()  # variables of this process the node does not get

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
            env={
                **{k: v for k, v in os.environ.items() if k not in self.env_without},
                "PYTHONUNBUFFERED": "1",
            },
            preexec_fn=self.preexec_fn,
        )
        log.close()

        proc = self.proc

        def healthy() -> bool:
            if proc.poll() is not None:
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
