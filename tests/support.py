"""Shared test helpers: configs with known tokens, and real node processes on free ports."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from node.config import Config, load_config

ROOT = Path(__file__).resolve().parent.parent
ADMIN_TOKEN = "test-admin-token-000000001"
READ_TOKEN = "test-read-token-0000000001"
OPERATE_TOKEN = "test-operate-token-0000001"
PUBLISH_TOKEN = "test-publish-token-0000001"


def auth(token: str = ADMIN_TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_config(
    directory: Path, extra: str = "", *, name: str = "node-a", port: int | None = None
) -> Path:
    """A runtime.toml with one token per scope; `extra` is appended TOML."""
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


class NodeProcess:
    """`python -m node run` in a subprocess: the real thing, killable with SIGKILL."""

    def __init__(self, config_path: Path) -> None:
        self.config_path = config_path
        self.config = load_config(config_path)
        self.url = f"http://{self.config.node.listen}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = config_path.parent / "node.log"

    def start(self, timeout: float = 30) -> NodeProcess:
        log = open(self.log_path, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "node", "run", "--config", str(self.config_path)],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"node exited early:\n{self.log_path.read_text()}")
            try:
                if httpx.get(self.url + "/api/v1/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"node did not become healthy:\n{self.log_path.read_text()}")

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
        return httpx.Client(base_url=self.url, headers=auth(token), timeout=30)

    def __enter__(self) -> NodeProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()
