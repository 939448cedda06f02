"""A node started from a shell (umask 022) keeps its data dir to its own user, and a secret an
agent prints reaches no file: a real node process, real writes, every path checked."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from pathlib import Path

import httpx

from node.runtime.compiled_cache import COMPILED_CACHE_ENV, COMPILED_DIR
from tests.polling import wait_until
from tests.runtime_support import COMPILED_CACHE
from tests.support import (
    ADMIN_TOKEN,
    PUBLISH_TOKEN,
    NodeProcess,
    auth,
    logs_on_failure,
    tiny_component,
    write_config,
)

SECRET = "sk-live-printed-by-the-agent-0451"


def start_with_umask(path: Path, umask: int) -> NodeProcess:
    """The node inherits the umask of the process that starts it, as from a shell."""
    previous = os.umask(umask)
    try:
        return NodeProcess(path).start(timeout=60)
    finally:
        os.umask(previous)


def seed_compiled(compiled: Path, component: Path) -> None:
    """The hostile agent's compiled artifact, as an older run left it (0644), so the node
    need not compile 18 MB of Python again; other agents it compiles itself."""
    compiled.mkdir(parents=True)
    digest = hashlib.sha256(component.read_bytes()).hexdigest()
    (artifact,) = COMPILED_CACHE.glob(f"{digest}-*.cwasm")
    shutil.copyfile(artifact, compiled / artifact.name)
    (compiled / artifact.name).chmod(0o644)


def test_every_path_under_the_data_dir_is_private_and_printed_secrets_stay_out(
    tmp_path, built_agents, monkeypatch
):
    path = write_config(
        tmp_path,
        f"""
[[agents]]
name = "hostile"
component = "{built_agents["hostile"]}"
tick_interval_ms = 60000
[agents.grants]
domains = ["payments"]


[[agents]]
name = "tiny"
component = "{built_agents["bad_err"]}"
tick_interval_ms = 60000

[secrets.payments]
api_key = "{SECRET}"
""",
    )
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    leftover = data / "left-by-an-older-release.json"  # written before this release's start
    leftover.write_text("{}")
    leftover.chmod(0o644)
    seed_compiled(data / COMPILED_DIR, built_agents["hostile"])
    monkeypatch.delenv(COMPILED_CACHE_ENV)  # the node's own cache, under its data dir

    node = start_with_umask(path, 0o022)
    with logs_on_failure(node.log_path):
        exercise(node)
    check_private(tmp_path, data, node)


def exercise(node: NodeProcess) -> None:
    """Writes of every kind: a journal, an agent's printed secret, a blob, the checkpoint."""
    try:
        with node.client() as client:  # admin: every scope
            task = client.post(
                "/api/v1/a2a/tasks",
                json={
                    "from": "tester",
                    "to": "hostile",
                    "input": {"case": "leak", "domain": "payments", "key": "api_key"},
                },
            ).json()
            wait_until(
                lambda: (
                    client.get(f"/api/v1/a2a/tasks/{task['id']}").json()["status"]
                    in ("completed", "failed")
                ),
                timeout=90,
            )
            assert client.get(f"/api/v1/a2a/tasks/{task['id']}").json()["status"] == "completed"
            finding = {"agent": "node-a", "severity": "low", "title": "written under umask 022"}
            assert client.post("/api/v1/findings", json=finding).status_code in (200, 201)
        published = httpx.post(
            node.url + "/api/v1/registry/packages",
            data={"id": "tiny", "version": "1.0.0", "description": "a blob on disk"},
            files={"wasm": ("agent.wasm", tiny_component(), "application/wasm")},
            headers=auth(PUBLISH_TOKEN),
            timeout=30,
        )
        assert published.status_code == 201, published.text
        logs = httpx.get(
            node.url + "/api/v1/logs",
            params={"agent": "hostile", "since": 0},
            headers=auth(ADMIN_TOKEN),
            timeout=10,
        ).json()["logs"]
        assert "stdout [secret:payments/api_key]" in [entry["message"] for entry in logs]
        # the agent's instance lives on: its output capture too, and nothing of it on disk
        assert files_holding(SECRET, node.config.data_path) == []
    finally:
        assert node.terminate() == 0  # a clean stop: the checkpoint is written too


def check_private(tmp_path: Path, data: Path, node: NodeProcess) -> None:
    paths = [data, *data.rglob("*")]
    names = {p.relative_to(data).parts[0] for p in paths[1:]}
    assert {"journal", "compiled", "node.key"} <= names, names  # the writes happened
    # one compiled by the node, and the published one, compiled once at its publish
    assert len(list((data / COMPILED_DIR).glob("*.cwasm"))) == 3
    assert any("registry" in str(p) for p in paths), names
    exposed = [
        f"{p.relative_to(tmp_path)} {stat.S_IMODE(p.lstat().st_mode):04o}"
        for p in paths
        if not p.is_symlink() and p.lstat().st_mode & 0o077
    ]
    assert exposed == []
    assert files_holding(SECRET, data, node.log_path) == []


def files_holding(text: str, folder: Path, *more: Path) -> list[Path]:
    paths = [*folder.rglob("*"), *more]
    return [p for p in paths if p.is_file() and text.encode() in p.read_bytes()]
