"""Every request body is read one way (node/web/body.py), with deadlines, at every door: a body
trickled to A2A JSON-RPC, MCP, a PATCH, a sync push or a registry upload gets a 408 in time; a
client that leaves mid-body is a counter, not a traceback; an upload holds no file before its
first byte; a token's uploads and requests in flight are capped (node/web/inflight.py)."""

from __future__ import annotations

import ast
import asyncio
import time
from pathlib import Path

import httpx
import pytest

from tests.polling import until
from tests.support import (
    ADMIN_TOKEN,
    OPERATE_TOKEN,
    PUBLISH_TOKEN,
    READ_TOKEN,
    NodeProcess,
    auth,
    logs_on_failure,
    tiny_component,
    write_config,
)

ROOT = Path(__file__).resolve().parents[2]
BODY_TIMEOUT = 1.0
UPLOAD_TIMEOUT = 2.5
PER_TOKEN = 6


# ------------------------------------------------------------------ the source
BODY_CALLS = {"read", "json", "text", "post", "multipart", "release"}


def _offences(path: Path) -> list[str]:
    """Calls that read a request's body without node/web/body.py: request.read() and the like,
    and request.multipart() not stepped by a BodyClock."""
    tree = ast.parse(path.read_text(), str(path))
    stepped = {
        id(arg)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "step"
        for arg in node.args
    }
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner = node.func.value
        named = ast.unparse(owner)
        if named not in ("request", "request.content") or node.func.attr not in BODY_CALLS | {
            "readany",
            "readchunk",
            "iter_chunked",
        }:
            continue
        if node.func.attr == "multipart" and id(node) in stepped:
            continue
        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_handler_reads_a_body_but_through_the_body_reader():
    offences = [
        offence
        for path in sorted((ROOT / "node").rglob("*.py"))
        if path != ROOT / "node" / "web" / "body.py"
        for offence in _offences(path)
    ]
    assert offences == [], "read bodies with node/web/body.py:\n" + "\n".join(offences)


# ------------------------------------------------------------------ a real node
@pytest.fixture(scope="module")
def body_node(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bodies")
    tiny_component(folder / "agent.wasm")
    keys = (
        f"body_timeout_secs = {BODY_TIMEOUT}\nupload_timeout_secs = {UPLOAD_TIMEOUT}\n"
        f"requests_per_token = {PER_TOKEN}\nuploads_per_token = 2\n"
    )
    agents = '\n[[agents]]\nname = "worker"\ncomponent = "agent.wasm"\nmcp = true\n'
    node = NodeProcess(write_config(folder, agents, node=keys))
    with logs_on_failure(node.log_path), node:
        yield node


async def trickled(
    node: NodeProcess,
    method: str,
    path: str,
    token: str,
    body: bytes,
    content_type: str = "application/json",
    *,
    every: float = 0.4,
    prefix: bytes = b"",
) -> tuple[float, bytes]:
    """Send the headers and `prefix`, then `body` a byte every `every` s, of a body declared
    100 KB longer; how long until the node answered, and the answer's head."""
    host, port = node.config.node.listen.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    started = time.monotonic()
    writer.write(
        f"{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: {content_type}\r\nContent-Length: {len(body) + 100_000}\r\n\r\n".encode()
        + prefix
    )

    async def trickle() -> None:
        for byte in body:
            writer.write(bytes([byte]))
            await asyncio.sleep(every)

    sending = asyncio.create_task(trickle())
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    finally:
        sending.cancel()
        writer.transport.abort()
    return time.monotonic() - started, head


def multipart(boundary: str, wasm: bytes = b"") -> bytes:
    return (
        f'--{boundary}\r\nContent-Disposition: form-data; name="id"\r\n\r\nslow\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="wasm"; filename="a.wasm"\r\n'
        "Content-Type: application/wasm\r\n\r\n"
    ).encode() + wasm


def metric(node: NodeProcess, name: str, label: str) -> float:
    text = node.client().get("/api/v1/metrics").text
    prefix = f"{name}{{{label}}} "
    (line,) = [line for line in text.splitlines() if line.startswith(prefix)]
    return float(line.split()[-1])


async def test_a_trickled_body_gets_408_at_every_door(body_node):
    node = body_node
    rpc = b'{"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}'
    mcp = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}'
    push = b'{"peer_id": "admin", "envelopes": []}'
    json = "application/json"
    doors = [
        ("POST", "/a2a/worker", READ_TOKEN, rpc, json),
        ("POST", "/api/v1/mcp/worker", OPERATE_TOKEN, mcp, json),
        ("PATCH", "/api/v1/agents/worker", ADMIN_TOKEN, b'{"description": "x"}', json),
        ("POST", "/api/v1/sync/envelopes", ADMIN_TOKEN, push, json),
        ("POST", "/api/v1/findings", OPERATE_TOKEN, b'{"agent": "a"}', json),
    ]
    before = metric(node, "svc_http_bodies_cut_total", 'reason="timeout"')
    answers = await asyncio.gather(
        *(trickled(node, m, p, t, b, c) for m, p, t, b, c in doors),
        # an upload whose bytes never stop, but come slower than the whole upload may take
        trickled(
            node,
            "POST",
            "/api/v1/registry/packages",
            PUBLISH_TOKEN,
            b"\0asm" * 40,
            "multipart/form-data; boundary=b",
            every=0.02,
            prefix=multipart("b"),
        ),
    )
    for (method, path, *_), (seconds, head) in zip(doors, answers, strict=False):
        assert head.startswith(b"HTTP/1.1 408"), (path, head)
        assert BODY_TIMEOUT - 0.1 < seconds < BODY_TIMEOUT + 1.5, (method, path, seconds)
    seconds, head = answers[-1]
    assert head.startswith(b"HTTP/1.1 408") and b"problem+json" in head, head
    assert UPLOAD_TIMEOUT - 0.1 < seconds < UPLOAD_TIMEOUT + 1.5, seconds
    after = metric(node, "svc_http_bodies_cut_total", 'reason="timeout"')
    assert after - before == len(answers)


async def test_an_upload_idle_between_chunks_gets_408_and_holds_no_file_before_its_first_byte(
    body_node,
):
    node = body_node
    tmp = node.config.data_path / "registry" / "tmp"
    host, port = node.config.node.listen.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    started = time.monotonic()
    body = multipart("b")  # up to the component's first byte, which never comes
    writer.write(
        "POST /api/v1/registry/packages HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {PUBLISH_TOKEN}\r\n"
        f"Content-Type: multipart/form-data; boundary=b\r\nContent-Length: {len(body) + 999}\r\n"
        "\r\n".encode()
        + body
    )
    await asyncio.sleep(BODY_TIMEOUT / 2)
    assert list(tmp.iterdir()) == []  # no staging file yet
    # the first bytes (the reader hands a chunk on once the next one shows it holds no
    # boundary): now there is a file
    writer.write(b"\0asm\r\0\1\0")
    await asyncio.sleep(0.1)
    writer.write(b"\0" * 8)
    await until(lambda: len(list(tmp.iterdir())) == 1, timeout=2, what="a staging file")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 408"), head
    assert time.monotonic() - started < BODY_TIMEOUT * 2 + 1
    await until(lambda: list(tmp.iterdir()) == [], timeout=2, what="the staging file removed")
    writer.transport.abort()


async def test_clients_that_leave_mid_body_are_counted_not_logged_as_errors(body_node):
    node = body_node
    host, port = node.config.node.listen.rsplit(":", 1)
    before = metric(node, "svc_http_bodies_cut_total", 'reason="disconnect"')
    requests = [
        ("/a2a/worker", READ_TOKEN, "application/json", b'{"jsonrpc":'),
        ("/api/v1/registry/packages", PUBLISH_TOKEN, "multipart/form-data; boundary=b",
         multipart("b", b"\0asm")),
    ]  # fmt: skip
    for _ in range(5):
        for path, token, content_type, body in requests:
            _, writer = await asyncio.open_connection(host, int(port))
            writer.write(
                f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                f"Content-Type: {content_type}\r\nContent-Length: 5000\r\n\r\n".encode()
                + body
            )
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.close()
    expected = before + 10
    await until(
        lambda: metric(node, "svc_http_bodies_cut_total", 'reason="disconnect"') == expected,
        timeout=5,
        what="ten disconnects counted",
    )
    log = node.log_path.read_text()
    assert "Traceback" not in log and "unhandled error" not in log, log[-3000:]


async def test_a_token_has_at_most_its_share_of_uploads_and_requests_in_flight(body_node):
    node = body_node
    slow = [
        asyncio.create_task(
            trickled(
                node,
                "POST",
                "/api/v1/registry/packages",
                PUBLISH_TOKEN,
                b"\0asm" * 10,
                "multipart/form-data; boundary=b",
                every=0.5,
                prefix=multipart("b"),
            )
        )
        for _ in range(2)
    ]
    await asyncio.sleep(0.3)
    async with httpx.AsyncClient(base_url=node.url, timeout=5) as client:
        files = {"id": (None, "x"), "version": (None, "1.0.0"), "wasm": ("a.wasm", b"\0asm")}
        third = await client.post(
            "/api/v1/registry/packages",
            files=files,
            headers=auth(PUBLISH_TOKEN),
        )
        assert third.status_code == 429, third.text
        assert third.headers["Retry-After"] == "1"
        assert "uploads_per_token" in third.json()["detail"]
        # the reader's requests in flight: bodies that take their time
        rpc = b'{"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}'
        held = [
            asyncio.create_task(trickled(node, "POST", "/a2a/worker", READ_TOKEN, rpc, every=0.5))
            for _ in range(PER_TOKEN)
        ]

        async def reader_status() -> httpx.Response:
            return await client.get("/api/v1/status", headers=auth(READ_TOKEN))

        refused = await until(
            lambda: _status_is(reader_status(), 429), timeout=3, what="the reader refused"
        )
        assert "requests_per_token" in refused.json()["detail"]
        other = await client.get("/api/v1/status", headers=auth(ADMIN_TOKEN))
        assert other.status_code == 200  # another token is not held back
        await asyncio.gather(*held, *slow)  # each ends with its 408
        await until(lambda: _status_is(reader_status(), 200), timeout=5, what="reader served")
    assert metric(node, "svc_http_requests_throttled_total", 'limit="uploads_per_token"') == 1
    assert metric(node, "svc_http_requests_throttled_total", 'limit="requests_per_token"') == 1


async def _status_is(answer, status: int) -> httpx.Response | None:
    response = await answer
    return response if response.status_code == status else None
