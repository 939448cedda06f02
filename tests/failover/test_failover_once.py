"""A task cut by the kill -9 of its home is resumed on the node that takes over, from the call
records the mesh's stream replicated (docs/agents.md, "When a node dies mid-run"): three real
nodes on a real 3-server nats-server cluster, the once agent placed on all three."""

from __future__ import annotations

from harness.failover import (
    LEASE_TTL_SECS,
    deploy,
    events,
    publish_component,
    wait_for,
    wait_runner,
)
from tests.runtime.once_support import Receiver

AGENT = "once"


def hosting(receiver: Receiver) -> str:
    return f"""
[actions.spend]
url = "{receiver.url}/spend"

[[hosting]]
agent = "{AGENT}"
owner = "node-a"  # ungated spends and a host: consent names whose agent (docs/mesh.md)
[hosting.capabilities]
spend = true
http_fetch = true
[hosting.http]
allow_hosts = ["127.0.0.1:{receiver.port}"]
"""


def test_the_new_home_resumes_the_cut_task_and_makes_each_spend_once(failover, built_agents):
    receiver = Receiver().start()
    try:
        fm = failover(extra_toml=hosting(receiver))
        component = publish_component(fm["node-a"], built_agents[AGENT], package=AGENT)
        body = {
            "capabilities": {"spend": True, "http_fetch": True},
            "allow_hosts": [f"127.0.0.1:{receiver.port}"],
        }
        deployed = deploy(
            fm["node-a"], component, ["node-a", "node-b", "node-c"], agent=AGENT, **body
        )
        assert deployed.status_code == 201, deployed.text
        home = wait_runner(fm, 30, agent=AGENT)
        receiver.arm()
        steps = [
            {"spend": {"amount": 3, "payee": "acme", "invoice": "M-1"}},
            {"fetch": f"{receiver.url}/held"},
            {"spend": {"amount": 4, "payee": "acme", "invoice": "M-2"}},
        ]
        with fm[home].client() as client:
            created = client.post(
                "/api/v1/a2a/tasks", json={"from": "tester", "to": AGENT, "input": {"steps": steps}}
            )
        assert created.status_code == 201, created.text
        task = created.json()["id"]
        wait_for(lambda: receiver.of("/held"), 30, "the first spend made and the fetch held")
        others = [n for n in fm.names if n != home]
        wait_for(
            lambda: all(
                # written in one write with its call.recorded
                [e for e in events(fm[n], AGENT) if e["type"] == "action.performed"]
                for n in others
            ),
            20,
            "the other nodes hold the first spend's record",
        )
        fm[home].kill()
        receiver.release.set()
        new_home = wait_runner(fm, LEASE_TTL_SECS + 20, among=others, agent=AGENT)

        def completed():
            done = [e for e in events(fm[new_home], AGENT) if e["type"] == "task.completed"]
            return done[0]["data"] if done and done[0]["data"]["id"] == task else None

        output = wait_for(completed, 60, "the task completes on the new home")["output"]
        assert [r["body"]["paid"] for r in output["results"] if isinstance(r, dict)] == [
            "M-1",
            "M-2",
        ]
        assert output["results"][1] == "fetched"
        assert len(receiver.spends("M-1")) == 1 and len(receiver.spends("M-2")) == 1
        fetches = receiver.of("/held")
        assert len(fetches) == 2 and fetches[0].key and fetches[0].key == fetches[1].key
    finally:
        receiver.stop()
