"""The client commands (approvals, status, tasks, logs, findings) against a real node process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.console_support import (
    FINANCE_TOKEN,
    ONCALL_TOKEN,
    TWO_WITH_FINANCE,
    console_config,
    seed_pending,
)
from tests.polling import wait_until
from tests.support import (
    ADMIN_TOKEN,
    READ_TOKEN,
    ROOT,
    NodeProcess,
    free_port,
    logs_on_failure,
    run_cli,
)


@pytest.fixture(scope="module")
def node(tmp_path_factory, built_agents):
    from node.runtime.compiled_cache import COMPILED_CACHE_ENV
    from tests.runtime_support import COMPILED_CACHE

    os.environ[COMPILED_CACHE_ENV] = str(COMPILED_CACHE)
    directory = tmp_path_factory.mktemp("cli-node")
    config = console_config(directory, built_agents, payer_tick_ms=60_000)
    seed_pending(config, "ledger", "refund", ["r-1", "r-2", "r-3"])
    seed_pending(config, "ledger", "export", ["e-1", "e-2"])
    seed_pending(config, "ledger", "payout", ["p-1"], approvers=TWO_WITH_FINANCE)
    node = NodeProcess(config)
    with logs_on_failure(node.log_path), node:
        yield node


def cli(node, *args: str, token: str = ADMIN_TOKEN) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, "--url", node.url, "--token", token)


def ok_json(node, *args: str, token: str = ADMIN_TOKEN):
    result = cli(node, *args, "--json", token=token)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_status_table_and_json(node):
    def loaded() -> bool:  # each of the four has its component loaded: a heap to show
        agents = ok_json(node, "status")
        return len(agents) == 4 and all(a["memory_profile"]["heap_bytes"] for a in agents)

    wait_until(loaded, 60)
    table = cli(node, "status")
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split() == [
        "AGENT", "STATUS", "UPTIME", "HEAP", "FUEL", "RESTARTS", "IDLE", "PHASE"
    ]  # fmt: skip
    # for people: `1.2 MiB`, `3 min 20 s`; --json keeps the raw numbers
    assert all(" MiB" in row or " KiB" in row for row in rows), rows
    assert all(" ms" in row or " s" in row for row in rows), rows
    assert {row.split()[0] for row in rows} == {"payer", "vault", "worker", "cashier"}
    [payer] = ok_json(node, "status", "--agent", "payer")
    assert payer["name"] == "payer" and "memory_profile" in payer


def test_approvals_list_approve_and_deny_a_group(node):
    pending = ok_json(node, "approvals", "list")
    assert {"r-1", "r-2", "r-3", "e-1", "e-2"} <= {p["id"] for p in pending}
    listed = cli(node, "approvals", "list").stdout.splitlines()
    assert listed[0].split()[:5] == ["ID", "AGENT", "CAPABILITY", "EXPIRES", "IN"]
    row = next(line for line in listed if line.startswith("r-1 "))
    assert " min " in row  # seeded with 600 s to go: `9 min 58 s`, not a timestamp
    table = cli(node, "approvals", "list", "--batched")
    assert "ledger" in table.stdout and "refund" in table.stdout and "3" in table.stdout
    # no call waits for these (the node that asked is gone) and, unhashed, nothing can ask again
    listed = cli(node, "approvals", "list")
    assert "orphaned (the agent instance that asked is gone and nothing" in listed.stdout

    one = ok_json(node, "approvals", "approve", "r-1")
    assert one["id"] == "r-1" and one["decision"] == "approve" and one["operator"] == "admin"
    assert one["applies"] == "never" and one["effect"].startswith("closed: no call waits")
    again = cli(node, "approvals", "approve", "r-1")
    assert again.returncode == 1 and "r-1" in again.stderr and "404" in again.stderr

    group = cli(node, "approvals", "deny", "--group", "ledger:refund", token=ONCALL_TOKEN)
    assert group.returncode == 0, group.stderr
    assert "deny: 2 decided" in group.stdout and "deny r-3" in group.stdout
    assert not any(p["id"].startswith("r-") for p in ok_json(node, "approvals", "list"))
    with node.client() as http:
        history = http.get("/api/v1/approvals/history").json()
    decided = {(r["id"], r["outcome"], r["operator"]) for r in history}
    assert {("r-1", "approve", "admin"), ("r-2", "deny", "oncall")} <= decided

    mixed = ok_json(node, "approvals", "approve", "e-1", "nope")
    assert mixed["ids"] == ["e-1"] and mixed["skipped"] == ["nope"]
    none = cli(node, "approvals", "deny", "nope", "nope-2")
    assert none.returncode == 1 and "skipped nope" in none.stdout
    missing = cli(node, "approvals", "deny", "--group", "ledger:refund")
    assert missing.returncode == 1 and "no pending approvals" in missing.stderr
    usage = cli(node, "approvals", "deny")
    assert usage.returncode == 2 and "--group" in usage.stderr


def test_two_approvers_one_from_finance_through_the_cli(node):
    def row() -> str:
        listed = cli(node, "approvals", "list").stdout.splitlines()
        return next(line for line in listed if line.startswith("p-1 "))

    assert "0 of 2, waiting for finance, 1 more approver" in row()
    first = cli(node, "approvals", "approve", "p-1", token=ONCALL_TOKEN)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == "approval of p-1 counted: 1 of 2, waiting for finance"
    assert "1 of 2, waiting for finance" in row()
    again = cli(node, "approvals", "approve", "p-1", token=ONCALL_TOKEN)
    assert again.returncode == 1 and "a token counts once" in again.stderr
    last = cli(node, "approvals", "approve", "p-1", token=FINANCE_TOKEN)
    assert last.returncode == 0 and last.stdout.startswith("approve p-1 at "), last.stderr
    history = cli(node, "approvals", "history", "--limit", "1").stdout.splitlines()
    assert "oncall, finance" in history[1] and "p-1" in history[1]


def test_a_read_token_may_list_but_not_decide(node):
    assert cli(node, "approvals", "list", token=READ_TOKEN).returncode == 0
    refused = cli(node, "approvals", "approve", "e-2", token=READ_TOKEN)
    assert refused.returncode == 1
    assert "lacks the scope" in refused.stderr and "403" in refused.stderr


def test_deny_with_a_reason_and_the_history_says_what_and_who(node):
    denied = cli(
        node, "approvals", "deny", "e-2", "--reason", "export not needed", token=ONCALL_TOKEN
    )
    assert denied.returncode == 0, denied.stderr
    assert denied.stdout.startswith("deny e-2 at ") and "export not needed" in denied.stdout
    refused = cli(node, "approvals", "approve", "nope", "--reason", "x")
    assert refused.returncode == 2 and "--reason" in refused.stderr  # deny only

    history = ok_json(node, "approvals", "history", "--limit", "1")
    assert history == [
        {
            "id": "e-2",
            "agent": "ledger",
            "outcome": "deny",
            "at": history[0]["at"],
            "operator": "oncall",
            "reason": "export not needed",
            "capability": "export",
            "detail": "export request e-2",
        }
    ]
    header, first, *_ = cli(node, "approvals", "history").stdout.splitlines()
    assert header.split() == [
        "AT",
        "AGENT",
        "OUTCOME",
        "CAPABILITY",
        "BY",
        "REASON",
        "ID",
        "DETAIL",
    ]
    assert first.split()[1:6] == ["ledger", "deny", "export", "oncall", "export"]
    assert "export not needed" in first and "export request e-2" in first


def test_tasks_create_get_list_and_cancel(node):
    created = ok_json(node, "tasks", "create", "--to", "worker", "--input", '{"numbers": [2, 3]}')
    assert created["status"] == "pending"
    done = wait_until(
        lambda: (t := ok_json(node, "tasks", "get", created["id"]))["status"] == "completed" and t
    )
    assert done["output"]["sum"] == 5
    text = cli(node, "tasks", "get", created["id"]).stdout
    assert f"id: {created['id']}" in text and "status: completed" in text
    listed = ok_json(node, "tasks", "list", "--status", "completed", "--agent", "worker")
    assert created["id"] in [t["id"] for t in listed]
    assert cli(node, "tasks", "list", "--agent", "worker").stdout.startswith("ID")

    paying = ok_json(node, "tasks", "create", "--to", "cashier", "--input", '{"pay": {"n": 1}}')
    wait_until(lambda: ok_json(node, "tasks", "get", paying["id"])["status"] == "running")
    canceled = cli(node, "tasks", "cancel", paying["id"], token=ONCALL_TOKEN)
    assert canceled.returncode == 0, canceled.stderr
    failed = wait_until(
        lambda: (t := ok_json(node, "tasks", "get", paying["id"]))["status"] == "failed" and t
    )
    assert failed["error"] == "canceled by oncall"
    twice = cli(node, "tasks", "cancel", paying["id"])
    assert twice.returncode == 1 and "cannot cancel" in twice.stderr

    bad_input = cli(node, "tasks", "create", "--to", "worker", "--input", "{nope")
    assert bad_input.returncode == 2 and "not JSON" in bad_input.stderr
    unknown = cli(node, "tasks", "get", "no-such-task")
    assert unknown.returncode == 1 and "404" in unknown.stderr


FOLLOW = [sys.executable, "-m", "node", "findings", "--follow", "--json", "--agent", "worker"]


def test_logs_and_findings_pages_filters_and_follow(node):
    with node.client() as http:
        http.post(
            "/api/v1/findings",
            json={"agent": "worker", "severity": "high", "title": "first", "detail": "d1"},
        ).raise_for_status()
    findings = [json.loads(line) for line in cli(node, "findings", "--json").stdout.splitlines()]
    assert [f["title"] for f in findings if f["agent"] == "worker"] == ["first"]
    assert [f["posted_by"] for f in findings if f["agent"] == "worker"] == ["admin"]
    table = cli(node, "findings", "--agent", "worker").stdout.splitlines()
    assert table[0].split() == ["SEQ", "TS", "SEVERITY", "AGENT", "BY", "TITLE", "DETAIL"]
    assert table[1].split()[3:6] == ["worker", "admin", "first"]
    with node.client() as http:  # an agent the node does not host: kept in the node's journal
        unknown = http.post(
            "/api/v1/findings", json={"agent": "probe", "severity": "high", "title": "x"}
        )
    assert unknown.status_code == 201 and "hosted on this node" in unknown.json()["note"]
    table = cli(node, "findings", "--agent", "probe").stdout.splitlines()
    assert table[1].split()[3:6] == ["probe", "admin", "x"]
    logs = [
        json.loads(line) for line in cli(node, "logs", "--json", "--limit", "3").stdout.splitlines()
    ]
    assert len(logs) <= 3 and all({"seq", "level", "message"} <= set(log) for log in logs)

    follow = subprocess.Popen(
        [*FOLLOW, "--url", node.url, "--token", READ_TOKEN],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert json.loads(follow.stdout.readline())["title"] == "first"
        with node.client() as http:
            http.post(
                "/api/v1/findings",
                json={"agent": "worker", "severity": "low", "title": "second", "detail": ""},
            ).raise_for_status()
        started = time.monotonic()
        assert json.loads(follow.stdout.readline())["title"] == "second"
        assert time.monotonic() - started < 10
    finally:
        follow.kill()
        follow.wait()


def test_errors_say_what_was_wrong(node):
    wrong = cli(node, "status", token="not-a-token")
    assert wrong.returncode == 1 and "the bearer token is not valid" in wrong.stderr
    env = {k: v for k, v in os.environ.items() if k != "AGENT_NODE_TOKEN"}
    no_token = subprocess.run(
        [sys.executable, "-m", "node", "status", "--url", node.url],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
    )
    assert no_token.returncode == 2 and "AGENT_NODE_TOKEN" in no_token.stderr
    down = run_cli("status", "--url", f"http://127.0.0.1:{free_port()}", "--token", "x")
    assert down.returncode == 1 and "cannot reach the node" in down.stderr


def test_url_and_token_come_from_the_environment(node):
    env = {**os.environ, "AGENT_NODE_URL": node.url, "AGENT_NODE_TOKEN": READ_TOKEN}
    result = subprocess.run(
        [sys.executable, "-m", "node", "status", "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert {s["name"] for s in json.loads(result.stdout)} == {"payer", "vault", "worker", "cashier"}
