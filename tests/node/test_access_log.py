"""Logs cannot be forged or flooded without a token (issue 34 item 6): the text access log
writes the request target as sent (percent-encoded, invisible characters escaped), and a
request the HTTP parser refuses is one WARNING line without a traceback, counted in a metric."""

from __future__ import annotations

import logging
import re
import socket

from node.ops.logsetup import Redactor, _TextFormatter
from tests.support import ADMIN_TOKEN, NodeProcess, write_config

FORGED = '2026-01-01 00:00:00,000 INFO agent-node.access: 10.0.0.1 "POST /api/v1/approvals"'


def exchange(node: NodeProcess, data: bytes) -> bytes:
    """Send raw bytes on a fresh connection; the status line of the answer."""
    host, port = node.config.node.listen.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(data)
        answer = b""
        while b"\r\n" not in answer:
            chunk = conn.recv(4096)
            if not chunk:
                break
            answer += chunk
    return answer.split(b"\r\n", 1)[0]


def malformed_count(node: NodeProcess, kind: str) -> float:
    with node.client() as http:
        text = http.get("/api/v1/metrics").text
    found = re.search(rf'^svc_http_malformed_requests_total\{{kind="{kind}"\}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def test_a_crlf_in_the_target_cannot_forge_an_access_line(tmp_path):
    node = NodeProcess(write_config(tmp_path), ("--access-log",))
    with node:
        target = "/api/v1/health%0d%0a" + FORGED.replace(" ", "%20") + "?x=%1b[2J&token=abc"
        status = exchange(
            node,
            f"GET {target} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\n"
            "Connection: close\r\n\r\n".encode(),
        )
        assert status.startswith(b"HTTP/1.1 404")
        assert node.terminate() == 0
    lines = node.log_path.read_text().splitlines()
    [access] = [line for line in lines if "%0d%0a" in line]
    # the target as sent, on its one line, the token's value still redacted
    assert '"GET /api/v1/health%0d%0a2026-01-01%2000:00:00,000%20INFO' in access
    assert re.search(r'[^"]" 404 \d+B [\d.]+ms admin \[request_id=\w+\]$', access)
    assert "x=%1b[2J&token=[redacted]" in access and "abc" not in access
    assert not any(line.startswith("2026-01-01") for line in lines)


def test_an_over_long_request_line_is_one_warning_and_counted(tmp_path):
    node = NodeProcess(write_config(tmp_path))
    with node:
        before = malformed_count(node, "LineTooLong")
        status = exchange(node, b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status.startswith(b"HTTP/1.0 400")
        bad_header = exchange(node, b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\x01: y\r\n\r\n")
        assert bad_header.startswith(b"HTTP/1.0 400")
        assert malformed_count(node, "LineTooLong") == before + 1
        assert malformed_count(node, "BadHttpMessage") == 1
        assert node.terminate() == 0
    text = node.log_path.read_text()
    assert "Traceback" not in text and " ERROR " not in text
    warnings = [line for line in text.splitlines() if " WARNING aiohttp.server: " in line]
    assert len(warnings) == 2, warnings
    too_long, header = warnings
    assert "malformed request from 127.0.0.1 refused with 400: LineTooLong: " in too_long
    assert len(too_long) < 400  # the 9,000 bytes are not repeated
    # the parser's own words, on one line: its line breaks and the stray byte escaped
    assert "BadHttpMessage: Invalid header token:\\n" in header and "\\x01" in header


def test_every_text_log_line_is_one_line():
    record = logging.LogRecord(
        "agent-node", logging.WARNING, __file__, 1, "peer said %s", (f"no\n{FORGED}\x1b[2J",), None
    )
    line = _TextFormatter(Redactor(["se\ncret-value"])).format(record)
    assert "\n" not in line and f"peer said no\\n{FORGED}\\x1b[2J" in line
    secret = logging.LogRecord(
        "agent-node", logging.INFO, __file__, 1, "got %s", ("se\ncret-value",), None
    )
    assert _TextFormatter(Redactor(["se\ncret-value"])).format(secret).endswith("got [redacted]")
