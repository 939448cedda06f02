"""A real `python -m node run` hosting real agents: approvals survive kill -9, tasks complete."""

from __future__ import annotations

import asyncio

from tests.polling import wait_until
from tests.support import NodeProcess, logs_on_failure, run_cli, write_config


def payer_toml(built_agents) -> str:
    """The payer, its spend gated, with a timeout no test waits for."""
    return f"""
[[agents]]
name = "payer"
component = "{built_agents["payer"]}"
tick_interval_ms = 200
[agents.capabilities]
spend = true
[agents.approval]
spend = true
timeout_secs = 120
"""


def test_pending_approval_survives_kill_9_and_the_agent_resumes_on_approve(tmp_path, built_agents):
    path = write_config(
        tmp_path,
        payer_toml(built_agents)
        + f"""
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
    with node, node.client() as client:  # killed (kill -9) on leaving, also on a failure
        pending = wait_until(lambda: client.get("/api/v1/approvals").json(), timeout=90)
    assert pending[0]["agent"] == "payer" and pending[0]["capability"] == "spend"
    approval_id = pending[0]["id"]

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


def test_after_kill_9_a_request_the_new_run_will_not_ask_again_is_closed(tmp_path, built_agents):
    """Issue 29 item 4: the payer's state moved on while the node was down (as an agent whose
    request comes from state or inference does), so its new run asks `spend` for the next
    invoice: the orphaned request for the first can never apply and is abandoned, and a late
    approve of it is a 409, never a success."""
    path = write_config(tmp_path, payer_toml(built_agents))
    node = NodeProcess(path)
    with logs_on_failure(node.log_path):
        with node, node.client() as client:  # killed (kill -9) on leaving
            pending = wait_until(lambda: client.get("/api/v1/approvals").json(), timeout=90)
        first = pending[0]["id"]
        assert "INV-0001" in pending[0]["request"]
        append_while_stopped(path, "payer", "state.set", {"key": "next_invoice", "value": "2"})

        with NodeProcess(path) as restarted, restarted.client() as client:

            def asked_for_the_next() -> list[dict]:
                listed = client.get("/api/v1/approvals").json()
                return [a for a in listed if "INV-0002" in a["request"]]

            (second,) = wait_until(asked_for_the_next, timeout=90)
            assert second["state"] == "pending"  # its call waits
            history = client.get("/api/v1/approvals/history").json()
            (closed,) = [h for h in history if h["id"] == first]
            assert closed["outcome"] == "abandoned"
            assert "asked spend for something else in a tick" in closed["reason"]
            late = client.post(f"/api/v1/approvals/{first}", json={"decision": "approve"})
            assert late.status_code == 409 and "abandoned" in late.json()["detail"]
            assert restarted.terminate() == 0


def append_while_stopped(config_path, stream: str, kind: str, data: dict) -> None:
    """One event straight into a stopped node's journal (state that moved on meanwhile)."""
    from eventstore.keys import load_or_create_key
    from node.app import open_store
    from node.config.load import load_config

    config = load_config(config_path)

    async def run() -> None:
        store = open_store(config, load_or_create_key(config.data_path))
        store.start()
        try:
            await store.append(stream, kind, data)
        finally:
            await store.close()

    asyncio.run(run())
