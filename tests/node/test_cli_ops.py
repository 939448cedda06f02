"""The CLI as an operator or an author meets it first, through real processes (issue 37):
`config init` makes a config a node starts on, a taken address is one line, the docs come with
the install, `config schema` says what every key means, `journal export` is what it says."""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import stat
import subprocess
import sys
import zipfile

import httpx
import msgspec

from node.config.help import undescribed
from tests.node.test_cli import seed_journal
from tests.support import ROOT, NodeProcess, free_port, logs_on_failure, run_cli, write_config


def test_config_init_writes_a_config_a_node_starts_on(tmp_path):
    path = tmp_path / "first" / "runtime.toml"
    path.parent.mkdir()
    port = free_port()
    made = run_cli("config", "init", "--config", str(path), "--listen", f"127.0.0.1:{port}")
    assert made.returncode == 0, made.stderr
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    (token,) = [
        line.rsplit(" ", 1)[1] for line in made.stdout.splitlines() if "admin token" in line
    ]
    text = path.read_text()
    assert token not in text  # only its hash
    assert hashlib.sha256(token.encode()).hexdigest() in text
    assert run_cli("config", "check", "--config", str(path)).returncode == 0

    node = NodeProcess(path)
    with logs_on_failure(node.log_path), node:
        headers = {"Authorization": f"Bearer {token}"}
        agents = httpx.get(f"{node.url}/api/v1/agents", headers=headers, timeout=30)
        assert agents.status_code == 200 and agents.json() == []
        anonymous = httpx.get(f"{node.url}/api/v1/agents", timeout=30)
        assert anonymous.status_code == 401
    assert (path.parent / "data").is_dir()  # data_dir is relative to the config's folder

    again = run_cli("config", "init", "--config", str(path))
    assert again.returncode == 1 and "not overwritten" in again.stderr
    assert path.read_text() == text


def test_config_init_refuses_a_bad_listen_address_and_name(tmp_path):
    path = tmp_path / "runtime.toml"
    bad = run_cli("config", "init", "--config", str(path), "--listen", "8080")
    assert bad.returncode == 2 and "--listen" in bad.stderr
    named = run_cli("config", "init", "--config", str(path), "--name", "no spaces")
    assert named.returncode == 2 and "--name" in named.stderr
    assert not path.exists()


def test_an_address_in_use_is_one_line_naming_the_key_and_exit_2(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        path = write_config(tmp_path, port=port)
        run = subprocess.run(
            [sys.executable, "-m", "node", "run", "--config", str(path)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert run.returncode == 2
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("agent-node: [node] listen = ")
    assert f"127.0.0.1:{port}" in lines[0] and "in use" in lines[0] and str(path) in lines[0]


def test_the_docs_come_with_the_install():
    listed = run_cli("docs")
    assert listed.returncode == 0, listed.stderr
    for topic in ("agents", "api", "configuration", "deploy", "operations", "protocols/mcp"):
        assert f"  {topic} " in listed.stdout
    agents = run_cli("docs", "agents")
    assert agents.returncode == 0
    assert agents.stdout == (ROOT / "docs" / "agents.md").read_text()
    where = run_cli("docs", "configuration", "--path")
    assert where.stdout.strip().endswith("configuration.md")
    unknown = run_cli("docs", "nope")
    assert unknown.returncode == 2 and "agents" in unknown.stderr
    # the help texts that send a reader to the docs name the command
    assert "agent-node docs" in run_cli("--help").stdout
    assert "agent-node docs agents" in run_cli("agent", "--help").stdout


def test_a_wheel_carries_the_docs_and_its_cli_prints_them(pure_wheel, tmp_path):
    """What a pip-only author has: the built wheel, installed apart from this checkout."""
    names = zipfile.ZipFile(pure_wheel.wheel).namelist()
    for name in ("agents.md", "api.md", "configuration.md", "deploy.md", "protocols/mcp.md"):
        assert f"node/docs/{name}" in names, names
    target, env, path = pure_wheel.site, pure_wheel.env, pure_wheel.python_path
    docs = subprocess.run(
        [sys.executable, "-S", "-m", "node", "docs", "agents"],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": path},
        cwd=tmp_path,
        timeout=120,
    )
    assert docs.returncode == 0, docs.stderr
    assert docs.stdout == (ROOT / "docs" / "agents.md").read_text()
    where = subprocess.run(
        [sys.executable, "-S", "-m", "node", "docs", "--path"],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": path},
        cwd=tmp_path,
        timeout=120,
    )
    assert where.stdout.strip() == str(target / "node" / "docs")


def test_config_schema_describes_every_key():
    assert undescribed() == []
    schema = json.loads(run_cli("config", "schema").stdout)
    for name, definition in schema["$defs"].items():
        for key, prop in definition.get("properties", {}).items():
            assert prop.get("description"), f"{name}.{key} has no description"
    node = schema["$defs"]["NodeSection"]["properties"]
    assert "HOST:PORT" in node["listen"]["description"]


def test_journal_export_lines_are_as_documented(tmp_path):
    path = write_config(tmp_path)
    seed_journal(path, streams=("a",), per_stream=2)
    export = run_cli("journal", "export", "--config", str(path), "--agent", "a")
    assert export.returncode == 0, export.stderr
    documented = run_cli("journal", "export", "--help").stdout
    for line in export.stdout.splitlines():
        record = json.loads(line)
        for key in record:
            assert f"\n  {key} " in documented, key
        payload = base64.b64decode(record["payload"])
        assert msgspec.msgpack.decode(payload) == record["event"]  # MessagePack of `event`
        assert record["payload_hash"] == "sha256:" + hashlib.sha256(payload).hexdigest()
        assert record["signature"].startswith("ed25519:")
