"""HTTPS end to end: a node serving TLS with a certificate from a CA made here, the CLI
talking to it with that CA file, and one node syncing to another over HTTPS."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys

import httpx
import pytest

from harness.tls import make_ca, make_server_cert, with_tls
from node.cli.config import check_file
from tests.polling import wait_until
from tests.support import ADMIN_TOKEN, ROOT, NodeProcess, free_port, run_cli, write_config
from tests.sync_support import SYNC_TUNING, peer_token, peer_toml

pytestmark = pytest.mark.timeout(180)


def test_the_cli_talks_to_a_tls_node_with_a_ca_file(tmp_path):
    ca = make_ca(tmp_path)
    cert, key = make_server_cert(tmp_path / "tls", ca)
    path = with_tls(write_config(tmp_path / "node"), cert, key)
    node = NodeProcess(path, ca_file=ca[0])
    assert node.url.startswith("https://127.0.0.1:")
    with node:
        assert node.config.public_url == node.url  # https by default with a certificate
        ok = run_cli("status", "--url", node.url, "--token", ADMIN_TOKEN, "--ca-file", str(ca[0]))
        assert ok.returncode == 0, ok.stderr
        untrusted = run_cli("status", "--url", node.url, "--token", ADMIN_TOKEN)
        assert untrusted.returncode == 1
        assert "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr
        with pytest.raises(httpx.HTTPError):  # no plain HTTP on the TLS port
            httpx.get(node.url.replace("https", "http") + "/api/v1/health", timeout=5)
        with_env = run_cli_env(
            {"AGENT_NODE_CA_FILE": str(ca[0])}, "status", "--url", node.url, "--token", ADMIN_TOKEN
        )
        assert with_env.returncode == 0, with_env.stderr
        assert "listening on https://127.0.0.1:" in node.log_path.read_text()

        # a renewal: new files in place, SIGHUP, and new connections get the new certificate
        before = served_certificate(node)
        assert before == cert.read_text()
        make_server_cert(tmp_path / "tls", ca)
        assert cert.read_text() != before
        node.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: served_certificate(node) == cert.read_text(), timeout=30)
        assert "SIGHUP: TLS certificate reloaded" in node.log_path.read_text()
        ok = run_cli("status", "--url", node.url, "--token", ADMIN_TOKEN, "--ca-file", str(ca[0]))
        assert ok.returncode == 0, ok.stderr


def served_certificate(node: NodeProcess) -> str:
    host, _, port = node.config.node.listen.rpartition(":")
    return ssl.get_server_certificate((host, int(port)))


def run_cli_env(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "node", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, **env},
    )


def test_a_peer_syncs_to_another_over_https(tmp_path):
    ca = make_ca(tmp_path)
    ports = {"node-a": free_port(), "node-b": free_port()}
    nodes = {}
    for name, other in (("node-a", "node-b"), ("node-b", "node-a")):
        cert, key = make_server_cert(tmp_path / name / "tls", ca)
        peers = peer_toml(
            other,
            f"https://127.0.0.1:{ports[other]}",
            accepts=peer_token(other, name),
            presents=peer_token(name, other),
        )
        mesh = f'\n[mesh]\nca_file = "{ca[0]}"\n'
        path = write_config(
            tmp_path / name, SYNC_TUNING + mesh + peers, name=name, port=ports[name]
        )
        nodes[name] = NodeProcess(with_tls(path, cert, key), ca_file=ca[0])
    a, b = nodes["node-a"], nodes["node-b"]
    try:
        a.start()
        b.start()
        with a.client() as client:
            for i in range(3):
                finding = {"agent": "node-a", "severity": "low", "title": f"over tls {i}"}
                assert client.post("/api/v1/findings", json=finding).status_code == 201

        def titles_on_b() -> list[str]:
            with b.client() as client:
                found = client.get("/api/v1/findings", params={"agent": "node-a", "since": 0})
                return [f["title"] for f in found.json()["findings"]]

        wait_until(lambda: len(titles_on_b()) == 3, timeout=60)
        assert titles_on_b() == [f"over tls {i}" for i in range(3)]
    finally:
        a.kill()
        b.kill()


def test_tls_settings_are_checked_with_their_keys(tmp_path):
    ca = make_ca(tmp_path)
    cert, key = make_server_cert(tmp_path / "tls", ca)
    path = write_config(tmp_path / "node")
    good = with_tls(path, cert, key).read_text()
    assert check_file(path) == []
    path.write_text(good.replace(f'tls_key_file = "{key}"\n', ""))
    assert any("tls_cert_file and tls_key_file go together" in p for p in check_file(path))
    key.chmod(0o644)
    path.write_text(good)
    assert any(f"node.tls_key_file: {key} is readable" in p for p in check_file(path))
    key.chmod(0o600)
    path.write_text(good.replace(str(cert), str(ca[0])))  # a certificate of another key
    (problem,) = check_file(path)
    assert "node.tls_cert_file/tls_key_file: cannot load" in problem
    key_text = key.read_text()
    assert key_text.splitlines()[1] not in problem  # never the key itself
    path.write_text(good + f'\n[mesh]\nca_file = "{key}"\n')  # not a certificate
    assert any("mesh.ca_file: cannot load" in p for p in check_file(path))
