"""`config check` and the node refuse credentials other users can read and the example tokens
on a reachable address, and say so when plain HTTP is served there: real CLI processes."""

from __future__ import annotations

import re
import tomllib

from node.config.exposure import EXAMPLE_TOKENS
from tests.support import ROOT, NodeProcess, free_port, run_cli, write_config

TOKEN_FILE_ENTRY = """
[[auth.tokens]]
name = "ops"
token_file = "ops.token"
scopes = ["read"]
"""


def test_config_check_and_the_node_refuse_a_token_file_others_can_read(tmp_path):
    token = tmp_path / "ops.token"
    token.write_text("ops-token-from-a-file-0001\n")
    token.chmod(0o644)
    path = write_config(tmp_path, TOKEN_FILE_ENTRY)
    check = run_cli("config", "check", "--config", str(path))
    assert check.returncode == 1
    assert f"auth.tokens[4].token_file: {token} is readable or writable by every local" in (
        check.stderr
    )
    assert "mode 0644); chmod 600 it" in check.stderr
    assert "ops-token-from-a-file" not in check.stderr + check.stdout
    run = run_cli("run", "--config", str(path), timeout=60)
    assert run.returncode == 2 and f"{token} is readable or writable" in run.stderr
    token.chmod(0o640)  # a service group may read it (docs/security.md)
    assert run_cli("config", "check", "--config", str(path)).returncode == 0
    token.chmod(0o620)
    group_writable = run_cli("config", "check", "--config", str(path))
    assert group_writable.returncode == 1 and "is group-writable (mode 0620)" in (
        group_writable.stderr
    )


def test_config_check_refuses_a_config_others_can_read_that_holds_tokens(tmp_path):
    path = write_config(tmp_path)
    path.chmod(0o644)
    check = run_cli("config", "check", "--config", str(path))
    assert check.returncode == 1
    assert f"{path}: holds plaintext credentials (auth.tokens[0].token" in check.stderr
    only_hashes = tmp_path / "hashed.toml"
    only_hashes.write_text(
        '[node]\nname = "node-a"\n\n[[auth.tokens]]\nname = "admin"\n'
        f'token_sha256 = "{"ab" * 32}"\nscopes = ["admin"]\n'
    )
    only_hashes.chmod(0o644)  # nothing secret in it: may be world-readable
    assert run_cli("config", "check", "--config", str(only_hashes)).returncode == 0


def public(path, listen: str) -> None:
    text = path.read_text()
    path.write_text(re.sub(r'listen = "[^"]+"', f'listen = "{listen}"', text, count=1))


def test_example_tokens_on_a_reachable_address_are_refused_and_plain_http_warned(tmp_path):
    port = free_port()
    path = write_config(
        tmp_path,
        f'\n[[auth.tokens]]\nname = "dev-admin"\ntoken = "{EXAMPLE_TOKENS[0]}"\n'
        'scopes = ["admin"]\n',
        port=port,
    )
    assert run_cli("config", "check", "--config", str(path)).returncode == 0  # loopback: dev
    public(path, f"0.0.0.0:{port}")
    check = run_cli("config", "check", "--config", str(path))
    assert check.returncode == 1
    assert f"auth.tokens[4]: the example token '{EXAMPLE_TOKENS[0]}' on node.listen" in (
        check.stderr
    )
    assert "warning: " in check.stderr and "serves plain HTTP" in check.stderr
    run = run_cli("run", "--config", str(path), timeout=60)
    assert run.returncode == 2 and "the example token" in run.stderr

    # a real token on 0.0.0.0 without TLS: accepted, with a warning, by the check and the node
    path.write_text(path.read_text().replace(EXAMPLE_TOKENS[0], "a-real-token-from-token-new-01"))
    warned = run_cli("config", "check", "--config", str(path))
    assert warned.returncode == 0 and "(1 warning(s))" in warned.stdout
    assert "warning: " in warned.stderr and "node.listen: '0.0.0.0:" in warned.stderr
    node = NodeProcess(path)
    node.url = f"http://127.0.0.1:{port}"
    with node:
        log = node.log_path.read_text()
    assert "WARNING agent-node: INSECURE: " in log and "serves plain HTTP" in log


def test_the_example_token_list_covers_every_token_in_examples():
    shipped = {
        entry["token"]
        for path in (ROOT / "examples").glob("*.toml")
        for entry in tomllib.loads(path.read_text()).get("auth", {}).get("tokens", [])
        if "token" in entry
    }
    assert shipped and shipped <= set(EXAMPLE_TOKENS)
