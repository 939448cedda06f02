"""A node serving TLS on a public address (node/web/tlsaccept.py, node/config/reload.py): a
connection is admitted at the accept, before its handshake, within the caps and the header
deadline; a reload with broken TLS files still applies tokens; a renewed certificate is swapped
in as a new context."""

from __future__ import annotations

import asyncio
import resource
import signal
import socket
import ssl
import time
from pathlib import Path

import httpx
import pytest

from harness.tls import make_ca, make_server_cert, with_tls
from tests.polling import wait_until
from tests.support import READ_TOKEN, NodeProcess, logs_on_failure, write_config

pytestmark = pytest.mark.timeout(120)

FD_LIMIT = 256
HEADER_TIMEOUT = 1.0


@pytest.fixture(scope="module")
def tls_node(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tls-admission")
    ca = make_ca(folder)
    cert, key = make_server_cert(folder / "tls", ca)
    keys = f"header_timeout_secs = {HEADER_TIMEOUT}\n"
    path = with_tls(write_config(folder / "node", node=keys), cert, key)
    node = NodeProcess(path, ca_file=ca[0])
    node.preexec_fn = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))
    node.ca = ca  # type: ignore[attr-defined]  # for a renewal below
    with logs_on_failure(node.log_path), node:
        yield node


def open_fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def closes(node: NodeProcess) -> dict[str, float]:
    text = node.client().get("/api/v1/metrics").text
    prefix = 'svc_http_connections_closed_total{reason="'
    return {
        line[len(prefix) :].split('"')[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(prefix)
    }


async def silent(host: str, port: int, address: str, hello: bytes) -> float:
    """A TCP connection from `address` that sends `hello` (nothing, or the start of a
    ClientHello) and waits; how long until the node closed it (10 s: never)."""
    reader, writer = await asyncio.open_connection(host, port, local_addr=(address, 0))
    started = time.monotonic()
    writer.write(hello)
    try:
        await asyncio.wait_for(reader.read(), 10)
    except (TimeoutError, ConnectionError):
        pass
    finally:
        writer.transport.abort()
    return time.monotonic() - started


async def health(node: NodeProcess, context: ssl.SSLContext) -> float:
    started = time.monotonic()
    async with httpx.AsyncClient(verify=context, timeout=5) as client:
        answer = await client.get(node.url + "/api/v1/health")
    assert answer.status_code == 200, answer.text
    return time.monotonic() - started


async def test_connections_that_never_finish_a_handshake_are_capped_and_closed(tls_node):
    node = tls_node
    host, port = node.config.node.listen.rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(node.ca[0]))
    before = closes(node)
    # more than the fd limit of connections that send no ClientHello, or half of one, from
    # two addresses under their per-address cap
    flood = []
    for i in range(FD_LIMIT + 40):
        hello = b"" if i % 3 else b"\x16\x03\x01"
        flood.append(asyncio.create_task(silent(host, int(port), f"127.0.1.{1 + i % 2}", hello)))
        if i % 50 == 49:  # within the listen backlog (128): the kernel holds no ghosts
            await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)
    latencies = [await health(node, context) for _ in range(10)]
    held = await asyncio.gather(*flood)
    assert max(latencies) < 2.0, latencies
    # each was closed within the deadline that includes the handshake, or made room earlier
    assert max(held) < HEADER_TIMEOUT + 1.5, max(held)
    after = closes(node)
    grew = {reason: after[reason] - before[reason] for reason in after}
    # past the cap each newcomer took the place of a silent one, or was refused at once
    assert grew["handshake_timeout"] > 0 and grew["evicted_silent"] + grew["refused"] > 0, grew
    assert grew["handshake_timeout"] + grew["evicted_silent"] + grew["refused"] == len(flood)
    assert "TLS handshake timeout" in node.log_path.read_text()
    wait_until(lambda: open_fds(node.pid) < FD_LIMIT // 2, timeout=5)


def test_plain_http_on_the_tls_port_is_counted_as_a_failed_handshake(tls_node):
    before = closes(tls_node)["handshake_failed"]
    host, port = tls_node.config.node.listen.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(1024) == b""  # closed: no HTTP answer before a handshake
    wait_until(lambda: closes(tls_node)["handshake_failed"] == before + 1, timeout=5)


def test_a_reload_with_broken_tls_files_still_applies_tokens_and_says_so(tls_node):
    node = tls_node
    cert = Path(node.config.node.tls_cert_file or "")
    config = node.config_path.read_text()
    try:
        cert.write_text("not a certificate\n")
        # the reader's token is revoked in the same reload
        node.config_path.write_text(config.replace('scopes = ["read"]', 'scopes = ["publish"]'))
        node.proc.send_signal(signal.SIGHUP)
        wait_until(
            lambda: node.client(READ_TOKEN).get("/api/v1/status").status_code == 403, timeout=10
        )
        said = lambda: "SIGHUP: TLS certificate NOT reloaded" in node.log_path.read_text()  # noqa: E731
        wait_until(said, timeout=10)
        assert node.client().get("/api/v1/status").status_code == 200  # the old certificate
        # the files fixed (a renewal), the next reload swaps the new certificate in
        make_server_cert(cert.parent, node.ca)
        node.config_path.write_text(config)
        node.proc.send_signal(signal.SIGHUP)
        host, port = node.config.node.listen.rsplit(":", 1)
        served = lambda: ssl.get_server_certificate((host, int(port)))  # noqa: E731
        wait_until(lambda: served() == cert.read_text(), timeout=10)
        assert node.client(READ_TOKEN).get("/api/v1/status").status_code == 200
    finally:
        node.config_path.write_text(config)


async def test_asyncio_s_own_loop_admits_before_the_handshake_too(tmp_path):
    """The TLS protocol is the event loop's own (uvloop's or asyncio's): the same bounds on
    asyncio's loop (`[node] event_loop = "asyncio"`)."""
    ca = make_ca(tmp_path)
    cert, key = make_server_cert(tmp_path / "tls", ca)
    keys = f'header_timeout_secs = {HEADER_TIMEOUT}\nevent_loop = "asyncio"\n'
    path = with_tls(write_config(tmp_path / "node", node=keys), cert, key)
    node = NodeProcess(path, ca_file=ca[0])
    with logs_on_failure(node.log_path), node:
        assert "event loop: asyncio" in node.log_path.read_text()
        host, port = node.config.node.listen.rsplit(":", 1)
        held = await asyncio.gather(
            *(silent(host, int(port), "127.0.0.1", hello) for hello in (b"", b"\x16\x03\x01"))
        )
        assert all(HEADER_TIMEOUT - 0.1 < seconds < HEADER_TIMEOUT + 1.5 for seconds in held)
        await health(node, ssl.create_default_context(cafile=str(ca[0])))
        assert closes(node)["handshake_timeout"] == 2
