"""A run cut by kill -9 is resumed by the restarted node without repeating what it had done
(docs/agents.md, "When a node dies mid-run"): a real node process, the once agent compiled
from agents/once, its spends decided by a policy with a budget, and a receiver (spends, a
fetch that holds its answer, an OpenAI-compatible chat server) that counts every request."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.failover import events
from tests.policy_support import POLICY_TOML, write_policy
from tests.polling import wait_until
from tests.runtime.once_support import ANSWER, Receiver
from tests.support import NodeProcess, write_config

AGENT = "once"


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    receiver = Receiver().start()
    yield receiver
    receiver.stop()


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory, built_agents, receiver) -> Path:
    """One node's config for the module's tests: each test kills it and starts it again."""
    directory = tmp_path_factory.mktemp("once")
    write_policy(directory)
    agent = f"""
[[agents]]
name = "{AGENT}"
component = "{built_agents[AGENT]}"
tick_interval_ms = 60000
[agents.capabilities]
spend = true
http_fetch = true
inference = true
[agents.http]
allow_hosts = ["127.0.0.1:{receiver.port}"]
[agents.approval]
spend = "policy"
timeout_secs = 60

[actions.spend]
url = "{receiver.url}/spend"

[inference]
local_url = "{receiver.url}/v1"
"""
    return write_config(directory, agent + POLICY_TOML)


def spend(invoice: str, amount: int) -> dict[str, Any]:
    return {"spend": {"amount": amount, "payee": "acme", "invoice": invoice}}


def create_task(node: NodeProcess, steps: list[dict[str, Any]]) -> str:
    with node.client() as client:
        body = {"from": "operator", "to": AGENT, "input": {"steps": steps}}
        response = client.post("/api/v1/a2a/tasks", json=body)
        assert response.status_code in (200, 201), response.text
        return str(response.json()["id"])


def finished(node: NodeProcess, task_id: str) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        with node.client() as client:
            task = client.get(f"/api/v1/a2a/tasks/{task_id}").json()
        return task if task["status"] in ("completed", "failed") else None

    task = wait_until(done, 60, f"task {task_id} finishes on the restarted node")
    assert task["status"] == "completed", task
    return task


def killed_and_restarted(
    node: NodeProcess, receiver: Receiver, ready: Any, what: str
) -> NodeProcess:
    """Kill -9 once `ready()` holds (the run is inside a held call), then start it again with
    the receiver answering at once."""
    wait_until(ready, 60, what)
    node.kill()
    receiver.release.set()
    return NodeProcess(node.config_path).start()


def decided_spends(node: NodeProcess, invoice: str) -> list[dict[str, Any]]:
    """The policy's decisions on the spends of `invoice`: each one charged the budget."""
    journal = events(node, AGENT)
    asked = {
        e["data"]["id"]
        for e in journal
        if e["type"] == "approval.requested" and f'"invoice": "{invoice}"' in e["data"]["request"]
    }
    return [
        e["data"] for e in journal if e["type"] == "approval.decided" and e["data"]["id"] in asked
    ]


def test_a_task_cut_by_kill_9_makes_each_spend_once_and_completes(config, receiver):
    receiver.arm()
    held_before = len(receiver.of("/held"))
    node = NodeProcess(config).start()
    try:
        task = create_task(
            node, [spend("A-1", 3), {"fetch": f"{receiver.url}/held"}, spend("B-1", 4)]
        )
        node = killed_and_restarted(
            node,
            receiver,
            lambda: receiver.spends("A-1") and len(receiver.of("/held")) > held_before,
            "the first spend made and the fetch held",
        )
        output = finished(node, task)["output"]
        assert output == {
            "results": [
                {"status": 200, "body": {"paid": "A-1"}},
                "fetched",
                {"status": 200, "body": {"paid": "B-1"}},
            ]
        }
        assert len(receiver.spends("A-1")) == 1 and len(receiver.spends("B-1")) == 1
        # the fetch in flight at the kill was made once more, with the same key
        fetches = receiver.of("/held")[held_before:]
        assert len(fetches) == 2 and fetches[0].key and fetches[0].key == fetches[1].key
        for invoice, amount in (("A-1", "3"), ("B-1", "4")):
            (decision,) = decided_spends(node, invoice)  # charged to the budget once
            assert decision["operator"] == "policy:small-payments"
            assert [c["amount"] for c in decision["charges"]] == [amount]
    finally:
        node.kill()


def test_a_spend_in_flight_at_the_kill_is_repeated_once_with_the_same_key(config, receiver):
    receiver.arm("A-2")
    node = NodeProcess(config).start()
    try:
        task = create_task(node, [spend("A-2", 2), spend("B-2", 2)])
        node = killed_and_restarted(
            node, receiver, lambda: receiver.spends("A-2"), "the receiver holds the first spend"
        )
        output = finished(node, task)["output"]
        assert [r["body"]["paid"] for r in output["results"]] == ["A-2", "B-2"]
        first = receiver.spends("A-2")
        assert len(first) == 2, "exactly one repeat"
        assert first[0].key and first[0].key == first[1].key
        assert first[0].key.startswith('"') and len(first[0].key) == 42
        assert len(receiver.spends("B-2")) == 1
        assert receiver.spends("B-2")[0].key not in (None, first[0].key)
        # approved by the policy before the kill: not asked, nor charged, again
        assert len(decided_spends(node, "A-2")) == 1
    finally:
        node.kill()


def test_an_inference_answered_before_the_kill_is_not_asked_again(config, receiver):
    receiver.arm()
    asked_before = len(receiver.of("/v1/chat/completions"))
    held_before = len(receiver.of("/held"))
    node = NodeProcess(config).start()
    try:
        task = create_task(
            node, [{"infer": "what is the answer?"}, {"fetch": f"{receiver.url}/held"}]
        )
        node = killed_and_restarted(
            node,
            receiver,
            lambda: len(receiver.of("/held")) > held_before,
            "the model answered and the fetch is held",
        )
        output = finished(node, task)["output"]
        assert output == {"results": [ANSWER, "fetched"]}
        assert len(receiver.of("/v1/chat/completions")) == asked_before + 1
        assert len(receiver.of("/held")) == held_before + 2  # the fetch in flight, once more
    finally:
        node.kill()


def test_a_run_that_draws_a_random_number_before_its_call_diverges_and_goes_live(config, receiver):
    receiver.arm()
    node = NodeProcess(config).start()
    try:
        steps = [
            {"random_spend": {"amount": 1, "payee": "acme", "invoice": "R-1"}},
            {"fetch": f"{receiver.url}/held"},
        ]
        held_before = len(receiver.of("/held"))
        task = create_task(node, steps)
        node = killed_and_restarted(
            node,
            receiver,
            lambda: receiver.spends("R-1") and len(receiver.of("/held")) > held_before,
            "the random spend made and the fetch held",
        )
        output = finished(node, task)["output"]
        made = receiver.spends("R-1")
        assert len(made) == 2, "the resumed run's spend is a live call"
        assert made[0].body["request"]["nonce"] != made[1].body["request"]["nonce"]
        assert made[0].key != made[1].key
        assert output["results"][0] == {"status": 200, "body": {"paid": "R-1"}}
        with node.client() as client:
            found = client.get("/api/v1/findings", params={"agent": AGENT}).json()["findings"]
        diverged = [f for f in found if f["title"] == "a resumed run diverged from its journal"]
        assert len(diverged) == 1 and "not deterministic" in diverged[0]["detail"]
    finally:
        node.kill()


def pending_spend(node: NodeProcess, invoice: str) -> dict[str, Any] | None:
    """The approval request listed as pending for the spend of `invoice`, if any."""
    with node.client() as client:
        listed = client.get("/api/v1/approvals").json()
    return next((a for a in listed if f'"invoice": "{invoice}"' in a["request"]), None)


def decide(node: NodeProcess, approval: dict[str, Any], decision: str) -> None:
    with node.client() as client:
        body = {"decision": decision, "request_hash": approval["request_hash"]}
        response = client.post(f"/api/v1/approvals/{approval['id']}", json=body)
    assert response.status_code == 200, response.text


def paid(invoice: str) -> dict[str, Any]:
    return {"status": 200, "body": {"paid": invoice}}


def test_a_task_waiting_for_people_is_parked_while_the_agent_works_on(config, receiver):
    """docs/agents.md, "A task waiting for people": the waiting run is cut at its approval
    (parked), a task the policy permits completes meanwhile, and the parked one resumes once
    decided: across a kill -9, adopting its pending request, its effects performed once."""
    receiver.arm()
    node = NodeProcess(config).start()
    try:
        waiting = create_task(node, [spend("P-1", 3), spend("W-1", 500)])  # 500: people decide
        asked = wait_until(lambda: pending_spend(node, "W-1"), 60, "W-1 waits for people")
        quick = create_task(node, [spend("Q-1", 2)])
        assert finished(node, quick)["output"] == {"results": [paid("Q-1")]}
        with node.client() as client:
            parked = client.get(f"/api/v1/a2a/tasks/{waiting}").json()
            (status,) = client.get("/api/v1/status", params={"agent": AGENT}).json()
        # still waiting: without parking the permitted task ran only once W-1 had expired
        assert parked.get("waiting_for") == "waiting for approval of spend", parked
        assert status["parked_tasks"] == [waiting], status

        node.kill()  # while parked
        node = NodeProcess(config).start()
        denied = create_task(node, [spend("D-1", 600)])
        to_deny = wait_until(lambda: pending_spend(node, "D-1"), 60, "D-1 waits for people")
        assert finished(node, create_task(node, [spend("Q-2", 1)]))["output"]["results"] == [
            paid("Q-2")
        ]
        # tasks run oldest first: the resumed run of the waiting task has asked and parked
        again = pending_spend(node, "W-1")
        assert again is not None and again["id"] == asked["id"]
        requested = [
            e
            for e in events(node, AGENT)
            if e["type"] == "approval.requested" and '"invoice": "W-1"' in e["data"]["request"]
        ]
        assert len(requested) == 1, "the pending request is adopted, not asked twice"
        decide(node, again, "approve")
        decide(node, to_deny, "deny")
        assert finished(node, waiting)["output"] == {"results": [paid("P-1"), paid("W-1")]}
        (refused,) = finished(node, denied)["output"]["results"]
        assert "denied spend" in refused["error"], refused
        for invoice, times in (("P-1", 1), ("W-1", 1), ("Q-1", 1), ("Q-2", 1), ("D-1", 0)):
            assert len(receiver.spends(invoice)) == times, invoice
        (decision,) = decided_spends(node, "P-1")  # replayed on each resume, charged once
        assert decision["operator"] == "policy:small-payments"
        parks = [e for e in events(node, AGENT) if e["type"] == "agent.errored"]
        assert not parks, "a park is no fault"
    finally:
        node.kill()
