"""`config check`, `config schema`, `*_file` credentials and SIGHUP reloads (real processes)."""

import json
import signal
import tomllib

import httpx
import jsonschema
import pytest

from node.config.load import load_config
from node.config.model import ConfigError
from tests.polling import wait_until
from tests.support import ADMIN_TOKEN, ROOT, NodeProcess, auth, run_cli, write_config

BROKEN = """
[node]
name = "node-a"
listen = "nowhere"
colour = "blue"
public_url = "node-a.example:8080"

[[auth.tokens]]
name = "admin"
token = "short"
scopes = ["admin"]

[[auth.tokens]]
name = "ops"
token_file = "missing-token"
scopes = ["read"]

[[peers]]
name = "node-b"
url = "ftp://x"

[[agents]]
name = "payer"
component = "nope.wasm"
tick_interval_ms = -5
[agents.capabilities]
spend = "yes"

[[agents]]
name = "refunder"
component = "registry:refunder"
[agents.capabilities]
spend = true
[agents.approval]
spend = true
refund = true

[secrets.payments]
api_key_file = "missing-secret"
"""


def test_config_check_reports_every_problem_with_its_key(tmp_path):
    path = tmp_path / "runtime.toml"
    path.write_text(BROKEN)
    path.chmod(0o600)
    done = run_cli("config", "check", "--config", str(path))
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    expected = [
        "node.colour: unknown key",
        "agents[0].tick_interval_ms: Expected `int` >= 1",
        "auth.tokens[1].token_file: cannot read",
        "secrets.payments.api_key_file: cannot read",
        "agents[0].capabilities.spend: expected a boolean",
        "auth.tokens[0].token: must be at least 16 characters",
        "peers[0]: give `token` or `token_file`",
        "peers[0].url: must start with http:// or https://",
        "node.listen: expected HOST:PORT, got 'nowhere'",
        "agents[0].component:",
        "node.public_url: must start with http:// or https:// and a host",
        "agents[1].component: a registry reference names its version",
        "agents[1].approval.refund: gates a capability the agent does not have",
    ]
    for fragment in expected:
        assert any(f"{path}: {fragment}" in line for line in lines), (fragment, lines)
    assert lines[-1] == f"{len(expected)} problem(s) in {path}"


def test_config_check_passes_a_good_config_and_names_a_bad_required_value(tmp_path):
    done = run_cli("config", "check", "--config", str(write_config(tmp_path)))
    assert done.returncode == 0 and done.stdout.startswith("config ok: "), done.stderr
    path = tmp_path / "bad.toml"
    path.write_text('[node]\nname = "no spaces allowed"\n')
    bad = run_cli("config", "check", "--config", str(path))
    assert bad.returncode == 1 and f"{path}: node.name: Expected `str` matching" in bad.stderr
    missing = run_cli("config", "check", "--config", str(tmp_path / "absent.toml"))
    assert missing.returncode == 1 and "cannot read" in missing.stderr


def test_config_schema_accepts_the_example_and_refuses_unknown_keys():
    done = run_cli("config", "schema")
    assert done.returncode == 0
    schema = json.loads(done.stdout)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    example = tomllib.loads((ROOT / "examples" / "runtime.toml").read_text())
    jsonschema.validate(example, schema)
    example["node"]["colour"] = "blue"
    with pytest.raises(jsonschema.ValidationError, match="colour"):
        jsonschema.validate(example, schema)
    assert "base_dir" not in schema["$defs"]["Config"]["properties"]


def test_token_peer_token_and_secret_files_are_read_relative_to_the_config(tmp_path):
    (tmp_path / "creds").mkdir()
    (tmp_path / "creds" / "ops").write_text("ops-token-from-a-file-0001\n")
    (tmp_path / "creds" / "peer").write_text("peer-token-from-a-file-01")
    (tmp_path / "creds" / "api").write_text("secret-from-a-file\n")
    for credential in (tmp_path / "creds").iterdir():
        credential.chmod(0o600)
    path = write_config(
        tmp_path,
        """
[[auth.tokens]]
name = "ops"
token_file = "creds/ops"
scopes = ["read"]

[[peers]]
name = "node-b"
url = "http://127.0.0.1:1"
token_file = "creds/peer"

[secrets.payments]
api_key_file = "creds/api"
region = "eu"
""",
    )
    config = load_config(path)
    assert config.auth.tokens[-1].token == "ops-token-from-a-file-0001"
    assert config.peers[0].token == "peer-token-from-a-file-01"
    assert config.secrets["payments"] == {"api_key": "secret-from-a-file", "region": "eu"}
    both = path.read_text().replace(
        'token_file = "creds/ops"', 'token_file = "creds/ops"\ntoken = "x"'
    )
    path.write_text(both)
    with pytest.raises(ConfigError, match=r"auth.tokens\[4\]: give exactly one of"):
        load_config(path)


def status_with(node: NodeProcess, token: str) -> int:
    return httpx.get(node.url + "/api/v1/status", headers=auth(token), timeout=10).status_code


def last_secret_length(node: NodeProcess) -> int | None:
    logs = httpx.get(
        node.url + "/api/v1/logs",
        params={"agent": "reader", "since": 0, "limit": 1000},
        headers=auth(ADMIN_TOKEN),
        timeout=10,
    ).json()["logs"]
    reads = [e["message"] for e in logs if e["message"].startswith("read payments/api_key")]
    return int(reads[-1].split("(")[1].split()[0]) if reads else None


def test_sighup_reloads_token_and_secret_files_and_journals_no_secret(tmp_path, built_agents):
    old_token, new_token = "ops-token-before-sighup-01", "ops-token-after-sighup-0002"
    old_secret, new_secret = "secret-one", "secret-number-two"
    token_file, secret_file = tmp_path / "ops.token", tmp_path / "api.key"
    token_file.write_text(old_token + "\n")
    secret_file.write_text(old_secret)
    token_file.chmod(0o600)
    secret_file.chmod(0o600)
    path = write_config(
        tmp_path,
        f"""
[[auth.tokens]]
name = "ops"
token_file = "ops.token"
scopes = ["read"]

[[agents]]
name = "reader"
component = "{built_agents["secrets_reader"]}"
tick_interval_ms = 100
[agents.grants]
domains = ["payments"]

[secrets.payments]
api_key_file = "api.key"
""",
    )
    node = NodeProcess(path)
    with node:
        assert status_with(node, old_token) == 200
        wait_until(lambda: last_secret_length(node) == len(old_secret))
        token_file.write_text(new_token + "\n")
        secret_file.write_text(new_secret)
        assert status_with(node, old_token) == 200  # nothing changes before the signal
        node.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: status_with(node, new_token) == 200)
        assert status_with(node, old_token) == 401
        wait_until(lambda: last_secret_length(node) == len(new_secret))
        # a config that does not load is refused as a whole: the running tokens stay
        good_config = path.read_text()
        path.write_text(good_config + "\n[node.oops]\n")
        node.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "config not reloaded" in node.log_path.read_text())
        assert status_with(node, new_token) == 200
        path.write_text(good_config)
        assert node.terminate() == 0
    exported = run_cli("journal", "export", "--config", str(path), "--agent", "$node")
    assert exported.returncode == 0, exported.stderr
    events = [json.loads(line)["event"] for line in exported.stdout.splitlines()]
    # `$node` also holds the agents' lifecycle: runtime.toml's reader, deployed at start
    assert [e["type"] for e in events] == ["agent.deployed", "node.reloaded"]
    reloaded = events[1]
    assert reloaded["data"]["secrets"] == ["payments.api_key"]
    assert "ops" in reloaded["data"]["tokens"] and reloaded["data"]["restart_needed"] == []
    journal = (tmp_path / "data" / "journal" / "data.mdb").read_bytes()
    log = node.log_path.read_text()
    for secret in (old_token, new_token, old_secret, new_secret):
        assert secret.encode() not in journal
        assert secret not in log
