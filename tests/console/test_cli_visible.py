"""What the CLI writes to a terminal is what is there: hostile text from clients, agents and
peers (escape sequences, CR, C1 controls, bidi overrides) reaches its tables as visible
escapes, byte for byte, through a real CLI process against a real node; `--json` stays exact."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from tests.console_support import ONCALL_TOKEN, console_config, seed_denied, seed_pending
from tests.polling import wait_until
from tests.support import ADMIN_TOKEN, ROOT, NodeProcess, logs_on_failure

# retitles the window, clears the screen, returns to the start of the row to print a fake
# line, starts a C1 control sequence (CSI, U+009B), and reverses what follows (U+202E)
HOSTILE = "\x1b]0;owned\x07\x1b[2J\x1b[31m\rAPPROVED by admin\x9b2J \u202eevorppa\u200b\n# ok"
RAW = [b"\x1b", b"\x07", b"\r", "\x9b".encode(), "\u202e".encode(), "\u200b".encode()]
SHOWN = [
    b"\\x1b]0;owned\\x07\\x1b[2J\\x1b[31m\\rAPPROVED by admin\\x9b2J \\u202eevorppa\\u200b\\n# ok"
]
PADDED_REQUEST = json.dumps({"memo": "\x1b[2J" + "pad " * 300, "amount": 90000, "to": "DE89"})


@pytest.fixture(scope="module")
def node(tmp_path_factory, built_agents):
    from node.runtime.compiled_cache import COMPILED_CACHE_ENV
    from tests.runtime_support import COMPILED_CACHE

    os.environ[COMPILED_CACHE_ENV] = str(COMPILED_CACHE)
    directory = tmp_path_factory.mktemp("cli-visible-node")
    config = console_config(directory, built_agents, payer_tick_ms=60_000)
    seed_pending(config, "ledger", "spend", ["padded-1"], request=PADDED_REQUEST, detail=HOSTILE)
    seed_denied(config, "ledger", "refund", "reversed-1", "\u202eevorppa")
    node = NodeProcess(config)
    with logs_on_failure(node.log_path), node:
        with node.client() as http:
            http.post(
                "/api/v1/findings",
                json={"agent": "worker", "severity": "high", "title": HOSTILE, "detail": HOSTILE},
            ).raise_for_status()
        yield node


def cli_bytes(node, *args: str, token: str = ADMIN_TOKEN) -> subprocess.CompletedProcess[bytes]:
    """The CLI's exact output bytes (no decoding, no newline translation)."""
    return subprocess.run(
        [sys.executable, "-m", "node", *args, "--url", node.url, "--token", token],
        capture_output=True,
        timeout=120,
        cwd=ROOT,
    )


def assert_shown_not_acted(output: bytes, shown: list[bytes] = SHOWN) -> None:
    for raw in RAW:
        assert raw not in output, f"{raw!r} reached the terminal: {output!r}"
    for text in shown:
        assert text in output, f"{text!r} not shown in {output!r}"


def test_findings_table_shows_escapes_and_json_stays_exact(node):
    table = cli_bytes(node, "findings", "--agent", "worker")
    assert table.returncode == 0, table.stderr
    assert_shown_not_acted(table.stdout)
    assert table.stdout.count(b"\n") == 2  # the header and one row: no line of its own making
    exact = cli_bytes(node, "findings", "--agent", "worker", "--json")
    [finding] = [json.loads(line) for line in exact.stdout.splitlines()]
    assert finding["title"] == HOSTILE and finding["detail"] == HOSTILE
    assert exact.stdout.isascii()  # JSON escapes it all, exactly


def test_tasks_get_shows_escapes(node):
    created = json.loads(
        cli_bytes(
            node,
            "tasks",
            "create",
            "--to",
            "worker",
            "--input",
            json.dumps({"note": HOSTILE}),
            "--json",
        ).stdout
    )
    wait_until(
        lambda: (
            json.loads(cli_bytes(node, "tasks", "get", created["id"], "--json").stdout)["status"]
            in ("completed", "failed")
        )
    )
    text = cli_bytes(node, "tasks", "get", created["id"])
    assert text.returncode == 0, text.stderr
    # JSON text escapes C0 controls its own way (\u001b); the rest shows as escapes too
    assert_shown_not_acted(text.stdout, [b"\\u001b]0;owned", b"\\x9b2J \\u202eevorppa\\u200b"])
    assert json.loads(cli_bytes(node, "tasks", "get", created["id"], "--json").stdout)["input"] == {
        "note": HOSTILE
    }


def test_an_error_from_the_node_is_shown_not_acted(node):
    missing = cli_bytes(node, "tasks", "get", HOSTILE)
    assert missing.returncode == 1
    assert b"404" in missing.stderr
    for raw in RAW:
        assert raw not in missing.stderr, missing.stderr


def test_approvals_list_summarises_the_request_with_its_size_and_hash(node):
    listed = cli_bytes(node, "approvals", "list")
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.split(b"\n")
    row = next(line for line in rows if line.startswith(b"padded-1 "))
    assert header.split()[-3:] == [b"SIZE", b"HASH", b"DETAIL"]
    for raw in RAW:
        assert raw not in listed.stdout, listed.stdout
    digest = hashlib.sha256(PADDED_REQUEST.encode()).hexdigest()
    # the amount first, the padding elided in the middle, the request's size and hash beside
    summary = b'spend: amount=90000, to="DE89", memo="\\u001b[2Jpad pad'
    assert b" 1.2 KiB  " + digest[:12].encode() + b"  " + summary in row
    assert "…".encode() in row and len(row) < 400
    exact = json.loads(cli_bytes(node, "approvals", "list", "--json").stdout)
    pending = next(p for p in exact if p["id"] == "padded-1")
    assert pending["request"] == PADDED_REQUEST and pending["detail"] == HOSTILE  # exact


def test_a_reversed_deny_reason_shows_as_what_it_is(node):
    history = cli_bytes(node, "approvals", "history")
    assert history.returncode == 0, history.stderr
    row = next(line for line in history.stdout.split(b"\n") if b"reversed-1" in line)
    assert b"\\u202eevorppa" in row and "\u202e".encode() not in row
    exact = json.loads(cli_bytes(node, "approvals", "history", "--json").stdout)
    assert next(r for r in exact if r["id"] == "reversed-1")["reason"] == "\u202eevorppa"
    # the API itself no longer takes such a reason
    refused = cli_bytes(
        node, "approvals", "deny", "padded-1", "--reason", "\u202eevorppa", token=ONCALL_TOKEN
    )
    assert refused.returncode == 1 and b"\\u202e" in refused.stderr
    assert b"400" in refused.stderr and "\u202e".encode() not in refused.stderr
