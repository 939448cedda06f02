"""A real `python -m node run` hosting real agents: approvals survive kill -9, tasks complete."""

from __future__ import annotations

from tests.polling import wait_until
from tests.support import NodeProcess, logs_on_failure, run_cli, write_config


def test_pending_approval_survives_kill_9_and_the_agent_resumes_on_approve(tmp_path, built_agents):
    path = write_config(
        tmp_path,
        f"""
[[agents]]
name = "payer"
component = "{built_agents["payer"]}"
tick_interval_ms = 200
[agents.capabilities]
spend = true
[agents.approval]
spend = true
timeout_secs = 120

[[agents]]
name = "worker"
component = "{built_agents["task_worker"]}"
tick_interval_ms = 200
""",
    )
    node = NodeProcess(path)
    with logs_on_failure(node.log_path):
        run_scenario(node, path)


def run_scenario(node: NodeProcess, path) -> None:
    node.start()
    with node.client() as client:
        pending = wait_until(lambda: client.get("/api/v1/approvals").json(), timeout=90)
    assert pending[0]["agent"] == "payer" and pending[0]["capability"] == "spend"
    approval_id = pending[0]["id"]
    node.kill()

    with NodeProcess(path) as restarted, restarted.client() as client:
        listed = client.get("/api/v1/approvals").json()
        assert approval_id in [a["id"] for a in listed]  # re-armed from the journal
        decided = client.post(f"/api/v1/approvals/{approval_id}", json={"decision": "approve"})
        assert decided.status_code == 200 and decided.json()["decision"] == "approve"

        def paid() -> bool:
            logs = client.get("/api/v1/logs", params={"limit": 1000}).json()["logs"]
            return any("paid INV-0001" in entry["message"] for entry in logs)

        wait_until(paid, timeout=90)
        again = client.post(f"/api/v1/approvals/{approval_id}", json={"decision": "deny"})
        assert again.status_code == 404

        task = client.post(
            "/api/v1/a2a/tasks",
            json={"from": "ops", "to": "worker", "input": {"numbers": [1, 2, 3]}},
        ).json()
        done = wait_until(
            lambda: (
                (t := client.get(f"/api/v1/a2a/tasks/{task['id']}").json())["status"] == "completed"
                and t
            )
        )
        assert done["output"] == {"sum": 6, "count": 3}
        status = {s["name"]: s for s in client.get("/api/v1/status").json()}
        assert status["payer"]["memory_profile"]["heap_bytes"] > 1_000_000
        assert status["worker"]["status"] in ("idle", "running")
        assert restarted.terminate() == 0

    verify = run_cli("audit", "verify", "--config", str(path))
    assert verify.returncode == 0, verify.stderr
