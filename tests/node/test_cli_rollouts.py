"""`agent-node agents` against a real node process (issue 37 items 2 and 3): `upgrade` follows
the probation and reports the node's automatic rollback (exit 1), `--no-wait` returns at once,
`show` marks the rollback as automatic, and a change that waits says what it waits for."""

from __future__ import annotations

import httpx

from node.runtime.compiled_cache import COMPILED_CACHE_ENV
from tests.node.test_lifecycle_restart import cli
from tests.polling import wait_until
from tests.runtime_support import COMPILED_CACHE
from tests.support import OPERATE_TOKEN, PUBLISH_TOKEN, NodeProcess, auth, write_config


def publish(client: httpx.Client, package: str, version: str, wasm) -> None:
    published = client.post(
        "/api/v1/registry/packages",
        data={"id": package, "version": version},
        files={"wasm": ("a.wasm", wasm.read_bytes())},
        headers=auth(PUBLISH_TOKEN),
        timeout=120,  # the registry compiles the component to check it
    )
    assert published.status_code == 201, published.text


def test_upgrade_follows_the_probation_and_show_marks_the_automatic_rollback(
    tmp_path, built_agents, monkeypatch
):
    monkeypatch.setenv(COMPILED_CACHE_ENV, str(COMPILED_CACHE))
    with NodeProcess(write_config(tmp_path)) as node, node.client() as client:
        publish(client, "greeter", "1.0.0", built_agents["hello"])
        publish(client, "greeter", "1.0.1", built_agents["hello"])
        publish(client, "greeter", "2.0.0", built_agents["bad_second_tick"])
        ref = "registry:greeter@1.0.0"
        deployed = cli(node, "deploy", "greeter", ref, "--tick-interval-ms", "200")
        assert deployed.returncode == 0, deployed.stderr

        # a release whose first tick works and whose second fails
        upgraded = cli(node, "upgrade", "greeter", "registry:greeter@2.0.0")
        assert upgraded.returncode == 1, upgraded.stdout + upgraded.stderr
        assert "greeter: upgraded to revision 2; on probation" in upgraded.stdout
        assert "revision 2 on probation: " in upgraded.stderr  # its progress
        assert (
            "revision 2 was rolled back automatically to revision 1: 1 fault(s)" in upgraded.stderr
        ), upgraded.stderr
        shown = cli(node, "show", "greeter")
        assert shown.returncode == 0, shown.stderr
        assert "rolled back automatically: revision 2 failed its probation" in shown.stdout
        rows = [line for line in shown.stdout.splitlines() if "rolled_back" in line]
        assert len(rows) == 1 and "rolled_back (automatic)" in rows[0], shown.stdout
        assert "revision: 1 " in shown.stdout

        # --no-wait: answered once the new instance ran once, its probation left running
        quick = cli(node, "upgrade", "greeter", "registry:greeter@1.0.1", "--no-wait")
        assert quick.returncode == 0, quick.stderr
        assert "upgraded to revision 3; on probation" in quick.stdout
        assert "passed its probation" not in quick.stderr
        wait_until(
            lambda: client.get("/api/v1/agents/greeter").json()["rollout"]["state"] == "passed",
            60,
            "revision 3 passes its probation",
        )


def test_a_change_that_waits_for_real_work_says_what_it_waits_for(
    tmp_path, built_agents, monkeypatch
):
    monkeypatch.setenv(COMPILED_CACHE_ENV, str(COMPILED_CACHE))
    with NodeProcess(write_config(tmp_path)) as node, node.client() as client:
        publish(client, "worker", "1.0.0", built_agents["task_worker"])
        deployed = cli(
            node,
            "deploy",
            "worker",
            "registry:worker@1.0.0",
            "--tick-interval-ms",
            "100",
            "--tick-timeout-ms",
            "300000",
        )
        assert deployed.returncode == 0, deployed.stderr
        task = {"from": "planner", "to": "worker", "input": {"numbers": list(range(2000))}}
        created = client.post("/api/v1/a2a/tasks", json=task, headers=auth(OPERATE_TOKEN))
        assert created.status_code == 201, created.text
        task_id = created.json()["id"]
        wait_until(
            lambda: client.get(f"/api/v1/a2a/tasks/{task_id}").json()["status"] == "running",
            30,
            "the task runs",
        )
        stopped = cli(node, "stop", "worker")
        assert stopped.returncode == 0, stopped.stderr
        assert "stop: waiting for draining the old instance: task " + task_id in stopped.stderr
        assert "worker: stopped" in stopped.stdout
