"""Operator logs: level, text or JSON lines with context, an opt-in access log, no secrets."""

import json
import logging

import httpx

from node.ops.logsetup import ContextFilter, Redactor, _json_formatter, _TextFormatter
from tests.polling import wait_until
from tests.support import ADMIN_TOKEN, READ_TOKEN, NodeProcess, auth, free_port, write_config

SECRET_VALUE = "sk-live-abcdef0123456789"
PEER_TOKEN = "peer-token-for-node-b-0000000001"
WRONG_TOKEN = "an_not-a-token-anyone-was-given-42"


def test_json_logs_carry_context_access_lines_and_never_a_secret(tmp_path, built_agents):
    extra = f"""
[[agents]]
name = "reader"
component = "{built_agents["secrets_reader"]}"
tick_interval_ms = 100
[agents.grants]
domains = ["payments"]

[[agents]]
name = "trapper"
component = "{built_agents["bad_trap"]}"
tick_interval_ms = 100

[secrets.payments]
api_key = "{SECRET_VALUE}"

[[peers]]
name = "node-b"
url = "http://127.0.0.1:{free_port()}"
token = "{PEER_TOKEN}"
"""
    config = write_config(tmp_path, extra)
    node = NodeProcess(config, ("--log-level", "debug", "--log-format", "json", "--access-log"))
    with node:
        with node.client() as client:
            answered = client.get("/api/v1/status", headers={"X-Request-Id": "req-42"})
            assert answered.status_code == 200 and answered.headers["X-Request-Id"] == "req-42"
            response = client.get("/api/v1/logs", params={"since": 0, "token": "abc"})
            assert len(response.headers["X-Request-Id"]) == 32  # made when the client sends none
            odd = client.get("/api/v1/status", headers={"X-Request-Id": "no spaces\tallowed"})
            assert odd.headers["X-Request-Id"] != "no spaces\tallowed"  # not echoed into logs
            wait_until(
                lambda: any(
                    "read payments/api_key" in entry["message"]
                    for entry in client.get("/api/v1/logs", params={"agent": "reader"}).json()[
                        "logs"
                    ]
                )
            )
        denied = httpx.get(
            node.url + "/api/v1/status", headers={**auth(WRONG_TOKEN), "X-Request-Id": "req-401"}
        )
        assert denied.status_code == 401 and denied.headers["X-Request-Id"] == "req-401"
        missing = httpx.get(
            node.url + "/api/v1/nowhere", headers={**auth(READ_TOKEN), "X-Request-Id": "req-404"}
        )
        assert missing.status_code == 404 and missing.headers["X-Request-Id"] == "req-404"
        with httpx.stream(  # a stream prepares its own response: it carries the id too
            "GET",
            node.url + "/api/v1/events",
            headers={**auth(READ_TOKEN), "X-Request-Id": "req-sse"},
        ) as stream:
            assert stream.status_code == 200 and stream.headers["X-Request-Id"] == "req-sse"
        assert f"the operator console is at {node.url}/console/" in node.log_path.read_text()
        wait_until(lambda: '"peer": "node-b"' in node.log_path.read_text())
        wait_until(lambda: '"agent": "trapper"' in node.log_path.read_text())
        assert node.terminate() == 0
    text = node.log_path.read_text()
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    assert all({"ts", "level", "logger", "message"} <= set(line) for line in lines)
    access = [line for line in lines if line["logger"] == "agent-node.access"]
    status = next(line for line in access if line.get("request_id") == "req-42")
    assert status["method"] == "GET" and status["path"] == "/api/v1/status"
    assert status["status"] == 200 and status["identity"] == "admin"
    assert any(line["path"] == "/api/v1/logs?since=0&token=[redacted]" for line in access)
    assert any(line["status"] == 401 and "identity" not in line for line in access)
    assert any(
        line.get("agent") == "trapper" for line in lines if line["logger"] != "agent-node.access"
    )
    assert any(line.get("peer") == "node-b" for line in lines)
    assert any(line["level"] == "DEBUG" for line in lines) or len(lines) > 5
    for secret in (SECRET_VALUE, ADMIN_TOKEN, PEER_TOKEN, WRONG_TOKEN):
        assert secret not in text


def test_text_logs_by_default_and_no_access_log_unless_asked(tmp_path):
    node = NodeProcess(write_config(tmp_path))
    with node:
        with node.client() as client:
            assert client.get("/api/v1/status").status_code == 200
        assert node.terminate() == 0
    text = node.log_path.read_text()
    assert " INFO agent-node: node node-a listening on " in text
    assert "agent-node.access" not in text and '"GET /api/v1/status"' not in text
    assert ADMIN_TOKEN not in text


def test_warning_level_hides_info(tmp_path):
    node = NodeProcess(write_config(tmp_path), ("--log-level", "warning"))
    with node:
        assert node.terminate() == 0
    assert " INFO " not in node.log_path.read_text()


def record(message: str, *args, thread: str = "MainThread") -> logging.LogRecord:
    made = logging.LogRecord("agent-node.test", logging.ERROR, __file__, 1, message, args, None)
    made.threadName = thread
    ContextFilter().filter(made)
    return made


def test_a_secret_in_a_message_or_traceback_is_redacted_in_both_formats():
    redact = Redactor([SECRET_VALUE, 'quote"d-secret'])
    try:
        raise ValueError(f"upstream refused {SECRET_VALUE}")
    except ValueError:
        import sys

        failing = record("calling with %s", 'quote"d-secret', thread="agent-payer")
        failing.exc_info = sys.exc_info()
    text = _TextFormatter(redact).format(failing)
    assert SECRET_VALUE not in text and 'quote"d-secret' not in text
    assert "[redacted]" in text and "agent=payer" in text
    failing.exc_text = None
    line = _json_formatter(redact).format(failing)
    parsed = json.loads(line)
    assert parsed["agent"] == "payer" and parsed["message"] == "calling with [redacted]"
    assert SECRET_VALUE not in line and 'quote\\"d-secret' not in line
    redact.update(["a-new-secret-value"])  # SIGHUP: the new set replaces the old one
    assert _TextFormatter(redact).format(record("x a-new-secret-value")).endswith("x [redacted]")
