"""`agent-node policy test` over a journal with a known history: what the set would have
decided beside what people decided, budgets replayed in order, `--since`, another set."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest

from eventstore.keys import load_or_create_key
from eventstore.store import NewEvent
from node.app import open_store
from node.cli.main import main
from node.config.load import load_config
from projections import catalogue as c
from projections.approvals import hash_request
from tests.policy_support import POLICY_TOML, payment, write_policy
from tests.support import replicate, write_config

# (id, request, how it ended, by whom): written in this order into payer's journal
HISTORY = [
    ("ok-small", payment(3), "approve", "operator"),
    ("denied-small", payment(5), "deny", "operator"),
    ("approved-mallory", payment(4, "mallory"), "approve", "admin"),
    ("big", payment(2000), "approve", "operator"),
    ("unread", payment(50), "timeout", None),
    *((f"run-{n}", payment(10, invoice=f"i-{n}"), "approve", "operator") for n in range(11)),
]


def asked(approval_id: str, request: str, task: str | None = None) -> NewEvent:
    data = c.ApprovalRequested(
        id=approval_id,
        capability="spend",
        request=request,
        request_hash=hash_request(request),
        task=task,
    )
    return NewEvent("payer", *c.event_of(data))


def ended(approval_id: str, outcome: str, by: str | None) -> NewEvent:
    if outcome == "timeout":
        return NewEvent("payer", *c.event_of(c.ApprovalTimedOut(id=approval_id)))
    decided = c.ApprovalDecided(id=approval_id, decision=outcome, operator=by)  # type: ignore[arg-type]
    return NewEvent("payer", *c.event_of(decided))


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    directory = tmp_path_factory.mktemp("policy-test")
    write_policy(directory)
    path = write_config(directory, POLICY_TOML)
    config = load_config(path)
    store = open_store(config, load_or_create_key(config.data_path))

    async def write() -> None:
        store.start()
        for approval_id, request, outcome, by in HISTORY:
            await store.append_many([asked(approval_id, request), ended(approval_id, outcome, by)])
        # a task made by the `ops` token asks, and is still pending
        task = c.TaskCreated(id="t-1", to="payer", caller="ops", input={})
        await store.append("payer", *c.event_of(task))
        await store.append_many([asked("in-task", payment(1), task="t-1")])
        # an old request in another node's journal: before any --since window
        old = (datetime.now(UTC) - timedelta(days=40)).isoformat().replace("+00:00", "Z")
        request = payment(9)
        data = c.event_of(
            c.ApprovalRequested(
                id="old", capability="spend", request=request, request_hash=hash_request(request)
            )
        )[1]
        await replicate(store, "ledger", c.APPROVAL_REQUESTED, data, ts=old)
        await store.close()

    asyncio.run(write())
    return path


def run(capsys, *args: str) -> str:
    assert main(["policy", "test", *args]) == 0
    return capsys.readouterr().out


def test_it_shows_what_the_set_would_have_decided_beside_what_people_did(history, capsys):
    report = json.loads(run(capsys, "--config", str(history), "--since", "30d", "--json"))
    rows = {row["id"]: row for row in report["rows"]}
    assert "old" not in rows  # 40 days ago
    assert (rows["ok-small"]["would"], rows["ok-small"]["actual"]) == ("permit", "approve")
    assert rows["ok-small"]["policies"] == ["small-payments"] and not rows["ok-small"]["differs"]
    assert rows["denied-small"]["differs"] and rows["denied-small"]["by"] == "operator"
    mallory = rows["approved-mallory"]
    assert (mallory["would"], mallory["actual"], mallory["differs"]) == ("forbid", "approve", True)
    assert mallory["why"] == "mallory is on the blocked list"
    assert rows["big"]["would"] == "ask" and rows["big"]["why"].endswith("asks 1, 1 from finance")
    assert (rows["unread"]["would"], rows["unread"]["actual"]) == ("ask", "timeout")
    # the budget (100 a day) is replayed in order: 3 + 5 + 10 x 9 = 98, the 10th run asks
    runs = [rows[f"run-{n}"]["would"] for n in range(11)]
    assert runs == ["permit"] * 9 + ["ask", "ask"]
    assert rows["run-9"]["why"].startswith("over the budget of policy small-payments")
    assert rows["in-task"]["actual"] == "pending"
    assert report["counts"]["differ"] == 2
    assert report["timezone"] == "UTC"
    assert report["counts"]["would"]["permit"] == {
        "approve": 10,
        "deny": 1,
        "timeout": 0,
        "abandoned": 0,
        "pending": 1,
    }


def test_the_table_lists_the_differences_first_and_another_set_can_be_tried(
    history, capsys, tmp_path
):
    text = run(capsys, "--config", str(history))
    assert "2 would be decided otherwise than people did" in text
    assert "≠ forbid (blocked-payee): mallory is on the blocked list" in text
    assert "approve by admin" in text
    assert "18 approval request(s) in the whole journal" in text  # the old one too
    # the zone the clock is read in is the config's, and the report says so
    assert "context.time replayed in UTC (the [policy] timezone of this config" in text
    other = tmp_path / "strict.cedar"
    other.write_text(
        '@id("no-spend") @reason("spending is paused")\n'
        'forbid (principal, action == Action::"spend", resource);\n'
    )
    strict = json.loads(run(capsys, "--config", str(history), "--policy", str(other), "--json"))
    assert {row["would"] for row in strict["rows"]} == {"forbid"}
    assert strict["counts"]["differ"] == 14  # every approved one
    only = json.loads(run(capsys, "--config", str(history), "--agent", "ledger", "--json"))
    assert [row["id"] for row in only["rows"]] == ["old"]
