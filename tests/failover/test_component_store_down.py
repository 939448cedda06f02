"""A placed deploy when the mesh's component store does not answer (issue 52 item 10): the
node's NATS link is up, the server stops answering (SIGSTOP, as a frozen or partitioned server
would), and the deploy answers 503 naming the component store, within its deadline, with
nothing deployed; once the server answers again the same deploy goes through. A real node
process on a real nats-server."""

from __future__ import annotations

import signal
import time

import httpx
import pytest

from harness.failover import AGENT, LEASE_TTL_SECS, agent_view, publish_component
from harness.nats import NatsServer, nats_mesh_toml
from harness.node import NodeProcess, write_config
from node.ops.polling import wait_until
from node.runtime.compiled_cache import COMPILED_CACHE_ENV
from tests.runtime_support import COMPILED_CACHE

pytestmark = pytest.mark.timeout(180)
SET = ["node-a", "node-b"]


def put(node: NodeProcess, agent: str, component: str) -> httpx.Response:
    """A placed deploy that does not wait for node-b (it never runs)."""
    with node.client() as client:
        return client.put(
            f"/api/v1/agents/{agent}",
            params={"wait_standby": "false"},
            json={"component": component, "tick_interval_ms": 200, "placement": SET},
            timeout=120,
        )


def deployed(node: NodeProcess, agent: str, component: str) -> httpx.Response:
    """The deploy's answer once the node's NATS link is up (503s before that, as a script
    deploying right after a start sees)."""
    answers: list[httpx.Response] = []

    def answered() -> bool:
        answers.append(put(node, agent, component))
        return answers[-1].status_code != 503

    wait_until(answered, 30, f"node-a takes the deploy of {agent}", 0.2)
    return answers[-1]


def test_a_placed_deploy_answers_503_while_the_component_store_does_not_answer(
    tmp_path, built_agents, monkeypatch
):
    monkeypatch.setenv(COMPILED_CACHE_ENV, str(COMPILED_CACHE))  # the run's compiles
    server = NatsServer(tmp_path / "nats", "n0").start()
    node: NodeProcess | None = None
    try:
        mesh = nats_mesh_toml([server.url]) + f"lease_ttl_secs = {LEASE_TTL_SECS}\n"
        node = NodeProcess(write_config(tmp_path / "node", mesh, name="node-a"))
        node.start(60)
        component = publish_component(node, built_agents["counter"])
        first = deployed(node, "first", component)
        assert first.status_code == 201, first.text  # the link is up: the store took it

        assert server.proc is not None
        server.proc.send_signal(signal.SIGSTOP)
        try:
            asked = time.monotonic()
            answer = put(node, AGENT, component)
            took = time.monotonic() - asked
        finally:
            server.proc.send_signal(signal.SIGCONT)
        assert answer.status_code == 503, answer.text
        assert answer.headers["content-type"].startswith("application/problem+json")
        detail = answer.json()["detail"]
        assert "the mesh's component store did not take it" in detail, detail
        assert took < 30, took  # the store's deadline, not the client's
        assert agent_view(node) is None  # nothing deployed

        again = deployed(node, AGENT, component)
        assert again.status_code == 201, again.text
    finally:
        if node is not None:
            node.kill()
        server.kill()
