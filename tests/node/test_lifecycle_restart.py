"""The deployed set is a projection of the journal: after kill -9 and after SIGTERM the node
runs what was deployed, upgraded, stopped and removed through the API; a runtime.toml that
declares an API-deployed agent stops the start, saying why (real node processes)."""

from __future__ import annotations

import json
import os

import httpx

from node.runtime.compiled_cache import COMPILED_CACHE_ENV
from tests.polling import wait_until
from tests.runtime_support import COMPILED_CACHE
from tests.support import (
    ADMIN_TOKEN,
    OPERATE_TOKEN,
    PUBLISH_TOKEN,
    NodeProcess,
    auth,
    run_cli,
    write_config,
)


def cli(node: NodeProcess, *args: str, token: str = ADMIN_TOKEN):
    return run_cli("agents", *args, "--url", node.url, "--token", token)


def agents(client: httpx.Client) -> dict[str, dict]:
    return {a["name"]: a for a in client.get("/api/v1/agents").json()}


def status(client: httpx.Client) -> dict[str, str]:
    return {s["name"]: s["status"] for s in client.get("/api/v1/status").json()}


def logs_after(client: httpx.Client, since: int, agent: str) -> tuple[int, int]:
    """(how many log lines of `agent` came after `since`, the last seq seen)."""
    count = 0
    while True:
        page = client.get("/api/v1/logs", params={"since": since, "limit": 1000}).json()
        count += sum(1 for entry in page["logs"] if entry["agent"] == agent)
        if not page["logs"]:
            return count, since
        since = page["next_seq"]


def test_the_deployed_set_survives_kill_9_and_sigterm_and_a_conflicting_config_stops_the_start(
    tmp_path, built_agents, monkeypatch
):
    monkeypatch.setenv(COMPILED_CACHE_ENV, str(COMPILED_CACHE))
    assert os.environ[COMPILED_CACHE_ENV]
    path = write_config(tmp_path)
    node = NodeProcess(path).start()
    try:
        with node.client() as client:
            published = client.post(
                "/api/v1/registry/packages",
                data={"id": "hello", "version": "1.0.0"},
                files={"wasm": ("a.wasm", built_agents["hello"].read_bytes())},
                headers=auth(PUBLISH_TOKEN),
                timeout=120,  # the registry compiles the component to check it
            )
            assert published.status_code == 201, published.text
            hello = {"component": "registry:hello@1.0.0", "tick_interval_ms": 200}
            for name in ("a", "b"):
                response = client.put(f"/api/v1/agents/{name}", json=hello)
                assert response.status_code == 201, response.text
            # the same through the CLI
            ref = "registry:hello@1.0.0"
            deployed = cli(node, "deploy", "c", ref, "--gate", "spend")  # enables it too
            assert deployed.returncode == 0, deployed.stderr
            assert "c: deployed as revision 1" in deployed.stdout
            again = cli(node, "deploy", "c", ref)
            assert again.returncode == 1 and "use `agents upgrade`" in again.stderr
            upgraded = cli(node, "upgrade", "a", ref, "--tick-interval-ms", "300")
            assert upgraded.returncode == 0 and "upgraded to revision 2" in upgraded.stdout
            shown = cli(node, "show", "c", "--json")
            assert json.loads(shown.stdout)["definition"]["approval"] == {"spend": True}
            assert json.loads(shown.stdout)["definition"]["capabilities"] == {"spend": True}
            # upgrade sends a merge patch of the options given; the node's errors name them
            bad = cli(node, "upgrade", "c", ref, "--approval-timeout-secs", "0")
            assert bad.returncode == 1 and "--approval-timeout-secs:" in bad.stderr, bad.stderr
            kept = cli(node, "upgrade", "c", ref, "--description", "pays", "--json")
            assert kept.returncode == 0, kept.stderr
            definition = json.loads(kept.stdout)["agent"]["definition"]
            assert definition["description"] == "pays"
            assert definition["approval"] == {"spend": True}  # not given: kept
            dropped = cli(node, "upgrade", "c", ref, "--drop-capability", "spend", "--json")
            definition = json.loads(dropped.stdout)["agent"]["definition"]
            assert definition["capabilities"] == {} and definition["approval"] == {}
            assert cli(node, "stop", "b").returncode == 0
            denied = cli(node, "stop", "a", token=OPERATE_TOKEN)
            assert denied.returncode == 1 and "HTTP 403" in denied.stderr
            removed = cli(node, "rm", "c")
            assert removed.returncode == 0 and "removed; its journal is kept" in removed.stdout
            listed = cli(node, "list")
            assert listed.returncode == 0
            assert [line.split()[:4] for line in listed.stdout.splitlines()[1:]] == [
                ["a", "api", listed.stdout.splitlines()[1].split()[2], "2"],
                ["b", "api", "stopped", "1"],
            ]
            before = agents(client)
        node.kill()

        for restart in ("after kill -9", "after SIGTERM"):
            node.start()
            with node.client() as client:
                after = agents(client)
                assert set(after) == {"a", "b"}, restart
                assert after["a"]["current"]["revision"] == 2
                assert after["a"]["definition"]["limits"]["tick_interval_ms"] == 300
                assert after["a"]["history"] == before["a"]["history"]
                assert after["b"]["stopped"] is True
                now = status(client)
                assert set(now) == {"a", "b"} and now["b"] == "stopped" and now["a"] != "stopped"
                _, mark = logs_after(client, 0, "a")
                wait_until(
                    lambda m=mark: logs_after(client, m, "a")[0] > 0, 20, f"a runs {restart}"
                )
            if restart == "after kill -9":
                assert node.terminate() == 0
            else:
                node.kill()

        # runtime.toml now declares `a`, which the API deployed: a clear error, no silent winner
        text = path.read_text() + (
            f'\n[[agents]]\nname = "a"\ncomponent = "{built_agents["hello"]}"\n'
        )
        path.write_text(text)
        conflicting = NodeProcess(path)
        try:
            conflicting.start(timeout=20)
        except RuntimeError as exc:
            assert "deployed through the API" in str(exc)
        else:
            raise AssertionError("the node started with a conflicting runtime.toml")
    finally:
        node.kill()
