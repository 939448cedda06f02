"""What a node tells an operator about a placed agent (issue 44 item 7), in the console (Debian's
chromium, driven by Playwright) and through the CLI, against one real node process on a real
nats-server (tests/placed_view_support.py): `counter` runs here (its home, node-b ready to take
it, node-c dead), `ticker` is a replica of a journal node-b pushed, whose home's lease is gone
and whose operators' names are hostile."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator

import pytest
from playwright.sync_api import expect

from harness.failover import events, ticks
from node.cli.main import main
from tests.console.test_console_browser import (  # the browser and its pages, shared
    browser as browser,
)
from tests.console.test_console_browser import open_page as open_page
from tests.console.test_console_browser import screenshot_on_failure, sign_in
from tests.placed_view_support import (
    DEPLOYER,
    DEPLOYER_SHOWN,
    HOME_SET,
    INVISIBLE,
    STOPPER,
    STOPPER_SHOWN,
    PlacedViews,
    placed_views,
)
from tests.polling import wait_until
from tests.support import ADMIN_TOKEN, READ_TOKEN, logs_on_failure


@pytest.fixture(scope="module")
def mesh(tmp_path_factory, built_agents) -> Iterator[PlacedViews]:
    root = tmp_path_factory.mktemp("placed-views")
    with (
        placed_views(root, built_agents["counter"]) as views,
        logs_on_failure(views.node.log_path),
    ):
        yield views


@pytest.fixture
def cli(mesh, capsys) -> Callable[..., str]:
    """The CLI's output for `args` against the node (its main, in this process: the same code
    and HTTP calls as `agent-node ARGS`, without an interpreter's start per call)."""

    def run(*args: str, code: int = 0) -> str:
        capsys.readouterr()
        assert main([*args, "--url", mesh.node.url, "--token", ADMIN_TOKEN]) == code
        out, err = capsys.readouterr()
        for char in INVISIBLE:  # what a peer wrote reaches the terminal escaped
            assert char not in out + err
        return out if code == 0 else err

    return run


# ------------------------------------------------------------------------------- console
@screenshot_on_failure
def test_the_console_lists_a_replica_and_tells_where_it_runs(mesh, open_page):
    page = open_page()
    sign_in(page, mesh.node, ADMIN_TOKEN, view="agents")
    row = page.locator('#agent-list tr[data-agent="ticker"]')
    expect(row).to_contain_text("replica")
    expect(row.locator("td.runs-on")).to_have_text("node-b (epoch 1) suspect")
    expect(page.locator('#agent-list tr[data-agent="counter"] td.runs-on')).to_have_text(
        "node-a (epoch 0)"
    )
    page.get_by_role("button", name="ticker", exact=True).click()
    expect(page.locator("#placement-home")).to_have_text("node-b (epoch 1) suspect")
    expect(page.locator("#placement-lease")).to_contain_text("gone: node-b renews it no more")
    expect(page.locator("#placement-stopped")).to_have_text(STOPPER_SHOWN)
    expect(page.locator("#deploy-state")).to_contain_text(
        f"replica: runs on node-b (epoch 1), suspect; stopped by an operator ({STOPPER_SHOWN})"
    )
    expect(page.locator("#deploy-revision")).to_have_text("2 (version 1.2.0)")  # its journal's
    expect(page.locator("#placement-candidates")).to_have_text("no other node of its set now")
    # changed on its home: no button here, and a hint naming it
    expect(page.locator("#deploy-actions").get_by_role("button")).to_have_count(0)
    expect(page.locator("#replica-hint")).to_contain_text("ask its home, node-b")
    expect(page.locator("#move-form")).to_have_count(0)
    moves = page.locator("#placement table", has_text="Moves")
    expect(moves.locator("tbody tr")).to_have_count(1)
    expect(moves.locator("tbody tr")).to_contain_text("handoffnode-cnode-b")
    history = page.locator("#placement table", has_text="Deployments across homes")
    rows = history.locator("tbody tr")
    expect(rows).to_have_count(2)  # newest first
    expect(rows.nth(0)).to_contain_text(f"upgraded2node-bregistry:ticker@1.2.0{DEPLOYER_SHOWN}")
    expect(rows.nth(1)).to_contain_text("deployed1node-cregistry:ticker@1.0.0alice")
    text = page.locator("#agent-detail").inner_text()
    assert not any(char in text for char in INVISIBLE), text
    assert DEPLOYER not in text and STOPPER not in text


@screenshot_on_failure
def test_the_move_picker_offers_only_members_ready_to_take_it(mesh, open_page):
    mesh.advert("node-b", ["counter"])  # node-b is up and ready; node-c has no advert: dead
    page = open_page()
    sign_in(page, mesh.node, ADMIN_TOKEN, view="agents")
    page.get_by_role("button", name="counter", exact=True).click()
    expect(page.locator("#placement-lease")).to_contain_text("held by node-a (this node)")
    expect(page.locator("#placement-home")).to_have_text("node-a (epoch 0)")  # not suspect
    expect(page.locator("#placement-set")).to_have_text("node-a, node-b, node-c")
    options = page.locator("#move-target option")
    expect(options).to_have_count(1)
    expect(options).to_have_text("node-b")
    # node-b goes too: nothing to offer, and the panel says so at its next refresh
    mesh.withdraw("node-b")
    expect(page.locator("#move-form")).to_have_count(0)
    expect(page.locator("#move-none")).to_contain_text("no other node of its set is ready")
    # a token without admin sees where it runs, not the form
    reader = open_page()
    sign_in(reader, mesh.node, READ_TOKEN, view="agents")
    reader.get_by_role("button", name="counter", exact=True).click()
    expect(reader.locator("#placement-home")).to_have_text("node-a (epoch 0)")
    expect(reader.locator("#move-form, #move-none")).to_have_count(0)


# ------------------------------------------------------------------------------- CLI
def test_agents_list_marks_a_suspect_home(mesh, cli):
    rows = {line.split()[0]: line for line in cli("agents", "list").splitlines()}
    assert rows["AGENT"].split()[-2:] == ["RUNS", "ON"]
    assert re.search(r"replica \(stopped\) .* node-b \(suspect\)$", rows["ticker"])
    assert rows["counter"].endswith(" node-a")
    mesh.home_lease("ticker", "node-b", 1)  # node-b renews its lease: no longer suspect
    try:
        rows = {line.split()[0]: line for line in cli("agents", "list").splitlines()}
        assert rows["ticker"].endswith(" node-b")
    finally:
        mesh.lapse("ticker", "node-b")


def test_agents_show_tells_the_truth_about_a_replica(mesh, cli):
    lines = cli("agents", "show", "ticker").splitlines()
    assert lines[:2] == [
        "agent: ticker (api)",
        f"status: replica, stopped by an operator ({STOPPER_SHOWN})",
    ]
    assert "runs on: node-b (epoch 1), suspect" in lines
    assert "lease: gone: suspect (node-b renews it no more; a node of its set takes the agent " \
        "over once the lease has lapsed)" in lines  # fmt: skip
    assert "revision: 2  version: 1.2.0" in lines
    assert "ready to take it: no other node of its set now" in lines
    moves = lines.index("moves (newest first):")  # as the console lists them
    assert lines[moves + 1].split() == ["SEQ", "EPOCH", "FROM", "TO", "REASON", "AT"]
    assert lines[moves + 2].split()[:5] == ["3", "1", "node-c", "node-b", "handoff"]
    history = lines.index("deployments across homes (newest first):")
    assert lines[history + 1].split() == [
        "AT", "CHANGE", "REVISION", "NODE", "OPERATOR", "COMPONENT"
    ]  # fmt: skip
    assert lines[history + 3].split()[1:] == [
        "deployed", "1", "node-c", "alice", "registry:ticker@1.0.0"
    ]  # fmt: skip
    upgraded = lines[history + 2]
    assert upgraded.split()[1:4] == ["upgraded", "2", "node-b"]
    assert DEPLOYER_SHOWN in upgraded and upgraded.endswith("registry:ticker@1.2.0")
    assert len(lines) == history + 4  # every row on its own line, nothing after
    mesh.home_lease("ticker", "node-b", 1)
    try:
        shown = cli("agents", "show", "ticker")
    finally:
        mesh.lapse("ticker", "node-b")
    assert "runs on: node-b (epoch 1)\n" in shown
    assert re.search(r"^lease: node-b's, \d+\.\d s left$", shown, re.M), shown
    # --json is the API's, exact
    exact = json.loads(cli("agents", "show", "ticker", "--json"))
    assert exact["placement"]["stopped_by"] == STOPPER
    assert exact["placement"]["history"][-1]["operator"] == DEPLOYER


def test_agents_show_on_the_home_names_the_lease_and_the_ready_members(mesh, cli):
    mesh.advert("node-b", ["counter"])
    try:
        lines = cli("agents", "show", "counter").splitlines()
    finally:
        mesh.withdraw("node-b")
    assert "runs on: node-a (epoch 0)" in lines
    assert any(
        re.fullmatch(r"lease: held by node-a \(this node\), \d+\.\d s left", x) for x in lines
    )
    assert "ready to take it: node-b" in lines
    assert lines[lines.index("deployments across homes (newest first):") + 2].split()[1:5] == [
        "deployed", "1", "node-a", "admin"
    ]  # fmt: skip


def test_status_on_a_replica_says_where_it_runs(mesh, cli):
    rows = {line.split()[0]: line for line in cli("status").splitlines()}
    assert rows["ticker"].split()[1] == "replica"
    assert rows["ticker"].endswith(
        f"runs on node-b (epoch 1), suspect: its lease is gone; stopped by an operator "
        f"({STOPPER_SHOWN})"
    )
    assert rows["counter"].split()[1] in ("running", "idle")
    assert "(none)" not in rows
    one = cli("status", "--agent", "ticker").splitlines()
    assert len(one) == 2 and one[1].startswith("ticker ") and "runs on node-b" in one[1]
    [entry] = json.loads(cli("status", "--agent", "ticker", "--json"))
    assert entry | {"phase": None} == {
        "name": "ticker",
        "status": "replica",
        "phase": None,
        "runs_on": "node-b",
        "epoch": 1,
        "suspect": True,
        "stopped_by": STOPPER,
    }
    assert "no agent 'nope' on this node" in cli("status", "--agent", "nope", code=1)


# ------------------------------------------------------------------- changes on the home
def test_a_placed_agent_removed_and_deployed_again_alone_keeps_running(mesh):
    """Its placement's retirement is over once it is deployed again: the placement layer does
    not forget the new deployment for the old removal (it looks every second)."""
    with mesh.node.client() as client:
        component = mesh.agent("counter")["current"]["component"]
        assert client.delete("/api/v1/agents/counter").status_code == 200
        again = {"component": component, "tick_interval_ms": 100}
        answer = client.put("/api/v1/agents/counter", json=again, timeout=60)
        assert answer.status_code == 201, answer.text
    since = len(events(mesh.node))
    wait_until(
        lambda: len(ticks(events(mesh.node)[since:])) >= 20, 20, "20 ticks of the new deployment"
    )
    assert mesh.agent("counter")["status"] in ("running", "idle")
    placed = [e for e in events(mesh.node) if e["type"] == "agent.placed"]
    assert placed[-1]["data"]["placement"] == ["node-a"]


def test_a_drain_cut_short_gives_the_lease_up(mesh, cli):
    """A handoff that the stream does not acknowledge (it takes no message) is cut short by
    the drain's deadline (`node drain --within`): the agent is stopped here and its lease is
    given up, not renewed for ever with nothing running."""
    with mesh.node.client() as client:
        for within in ("0", "nan", "301"):  # out of bounds: refused before anything moves
            refused = client.post("/api/v1/node/drain", params={"within_s": within})
            assert refused.status_code == 400 and "within_s" in refused.text, refused.text
        placed = client.patch(
            "/api/v1/agents/counter",
            # ticks a minute apart: nothing but the handoff is published while the stream is
            # full (a refused publish drops the node's NATS connection, its adverts' reads too)
            content=json.dumps({"placement": HOME_SET, "tick_interval_ms": 60_000}),
            headers={"Content-Type": "application/merge-patch+json"},
            timeout=60,
        )
        assert placed.status_code == 200, placed.text
        wait_until(lambda: mesh.lease_of("counter", "node-a"), 20, "node-a holds the lease")
        mesh.advert("node-b", ["counter"])
        mesh.stream_full(True)
        try:
            drained = json.loads(cli("node", "drain", "--within", "1", "--json"))
        finally:
            mesh.stream_full(False)
    assert drained["agents"] == [{"agent": "counter", "done": "released", "why": "the time was up"}]
    wait_until(lambda: mesh.lease_of("counter", "node-a") is None, 10, "the lease given up")
