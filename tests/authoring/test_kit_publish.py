"""`agent publish` to a real node (`python -m node run`): the package lands in its registry, and
an agent that runtime.toml names by the printed reference starts running it, no restart."""

from __future__ import annotations

import hashlib
import json

import pytest

from node.runtime.compiled_cache import COMPILED_CACHE_ENV
from tests.authoring.kit_support import agent
from tests.polling import wait_until
from tests.runtime_support import COMPILED_CACHE
from tests.support import PUBLISH_TOKEN, READ_TOKEN, NodeProcess, logs_on_failure, write_config


@pytest.mark.timeout(300)
def test_publish_then_the_node_runs_the_reference(tmp_path, built_agents, monkeypatch):
    monkeypatch.setenv(COMPILED_CACHE_ENV, str(COMPILED_CACHE))  # js_hello is compiled there
    config = write_config(
        tmp_path / "node",
        """
[[agents]]
name = "kit-demo"
component = "registry:kit-demo@0.1.0"
tick_interval_ms = 200
""",
    )
    made = agent("new", "kit-demo", "--lang", "js", "--dir", str(tmp_path), cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    project = tmp_path / "kit-demo"
    wasm = built_agents["js_hello"]  # what `agent build` makes, built once for the session
    node = NodeProcess(config)
    with logs_on_failure(node.log_path), node, node.client(READ_TOKEN) as client:
        published = agent(
            "publish", str(project), "--wasm", str(wasm), "--url", node.url,
            "--token", PUBLISH_TOKEN, cwd=tmp_path,
        )  # fmt: skip
        assert published.returncode == 0, published.stderr
        assert published.stdout == "registry:kit-demo@0.1.0\n"
        checksum = "sha256:" + hashlib.sha256(wasm.read_bytes()).hexdigest()
        assert f"published kit-demo 0.1.0 ({checksum})" in published.stderr
        # the next step, as the node's API takes it (issue 52 item 9)
        assert (
            "deploy it: agent-node agents deploy kit-demo registry:kit-demo@0.1.0"
            in published.stderr
        )

        package = client.get("/api/v1/registry/packages/kit-demo").json()
        assert package["versions"] == ["0.1.0"] and package["checksum"] == checksum
        assert package["description"] == "Counts words; a template to start from"

        again = agent(
            "publish", str(project), "--wasm", str(wasm), "--url", node.url,
            "--token", PUBLISH_TOKEN, cwd=tmp_path,
        )  # fmt: skip
        assert again.returncode == 1
        assert "kit-demo@0.1.0 is already published (HTTP 409)" in again.stderr

        newer = agent(
            "publish", str(project), "--wasm", str(wasm), "--url", node.url,
            "--token", PUBLISH_TOKEN, "--version", "0.2.0", "--json", cwd=tmp_path,
        )  # fmt: skip
        assert newer.returncode == 0, newer.stderr
        answer = json.loads(newer.stdout)
        assert answer["reference"] == "registry:kit-demo@0.2.0"
        assert answer["checksum"] == checksum

        refused = agent(
            "publish", str(project), "--wasm", str(wasm), "--url", node.url,
            "--token", READ_TOKEN, "--version", "0.3.0", cwd=tmp_path,
        )  # fmt: skip
        assert refused.returncode == 1 and "(HTTP 403)" in refused.stderr

        # meanwhile the node retried the reference (backoff) and found it
        def ran() -> list[str]:
            logs = client.get("/api/v1/logs", params={"agent": "kit-demo"}).json()["logs"]
            return [e["message"] for e in logs if "JavaScript agent" in e["message"]]

        assert wait_until(ran, 120, "kit-demo ran the published package")[0] == (
            "hello from a JavaScript agent, tick 1"
        )


def test_publish_needs_a_url_a_token_and_a_build(tmp_path, monkeypatch):
    monkeypatch.delenv("AGENT_NODE_URL", raising=False)
    monkeypatch.delenv("AGENT_NODE_TOKEN", raising=False)
    agent("new", "unbuilt", "--dir", str(tmp_path), cwd=tmp_path)
    project = str(tmp_path / "unbuilt")
    no_url = agent("publish", project, "--token", "t", cwd=tmp_path)
    assert no_url.returncode == 2 and "give the node's --url" in no_url.stderr
    no_token = agent("publish", project, "--url", "http://127.0.0.1:9", cwd=tmp_path)
    assert no_token.returncode == 2 and "give --token" in no_token.stderr
    unbuilt = agent("publish", project, "--url", "http://127.0.0.1:9", "--token", "t", cwd=tmp_path)
    assert unbuilt.returncode == 1
    assert "unbuilt.wasm does not exist: run `agent-node agent build` first" in unbuilt.stderr
    elsewhere = agent("publish", str(tmp_path), "--url", "http://x", "--token", "t", cwd=tmp_path)
    assert (
        elsewhere.returncode == 1 and "is not an agent project (no agent.toml)" in elsewhere.stderr
    )
