"""docs/deploy.md: the systemd unit verifies, the docs show the shipped unit, the config checks."""

import re
import shutil
import subprocess

from tests.support import ROOT, run_cli

UNIT = ROOT / "deploy" / "agent-node.service"
DEPLOY_DOC = ROOT / "docs" / "deploy.md"
INSTALLED_BINARY = "/opt/agent-node/venv/bin/agent-node"
CREDENTIALS = "/run/credentials/agent-node.service/"


def fenced(doc: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", doc, re.S)


def test_the_unit_passes_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: scripts/setup --test installs the systemd package"
    binary = shutil.which("agent-node") or str(ROOT / ".venv" / "bin" / "agent-node")
    unit = tmp_path / "agent-node.service"
    unit.write_text(UNIT.read_text().replace(INSTALLED_BINARY, binary))
    done = subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "", done.stderr  # not even a warning (unknown keys warn)
    broken = tmp_path / "broken.service"
    broken.write_text(unit.read_text().replace("TimeoutStopSec=", "TimeoutStopSecs="))
    refused = subprocess.run(
        [analyze, "verify", str(broken)], capture_output=True, text=True, timeout=60
    )
    assert "Unknown key 'TimeoutStopSecs'" in refused.stderr  # the check does look at keys


def test_the_docs_show_the_shipped_unit_and_the_readme_links_them():
    doc = DEPLOY_DOC.read_text()
    assert UNIT.read_text() in fenced(doc, "ini")
    assert "(docs/deploy.md)" in (ROOT / "README.md").read_text()


def test_the_stop_timeout_outlasts_the_graceful_shutdown():
    unit = UNIT.read_text()
    stop_timeout = int(re.search(r"^TimeoutStopSec=(\d+)$", unit, re.M).group(1))
    config = fenced(DEPLOY_DOC.read_text(), "toml")[0]  # the config; later ones are agents
    drain = float(re.search(r"^shutdown_drain_secs = ([\d.]+)$", config, re.M).group(1))
    in_flight, agents = 30, 15  # node/server.py shutdown_timeout, runtime stop (operations.md)
    assert stop_timeout > drain + in_flight + agents
    assert "ExecReload=/bin/kill -HUP $MAINPID" in unit
    for credential in re.findall(r"^LoadCredential=([\w-]+):", unit, re.M):
        assert CREDENTIALS + credential in config  # each credential is used through *_file


def test_the_documented_config_passes_config_check(tmp_path):
    config = fenced(DEPLOY_DOC.read_text(), "toml")[0]  # the config; later ones are agents
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    for name in re.findall(re.escape(CREDENTIALS) + r'([\w-]+)"', config):
        (credentials / name).write_text(f"value-of-{name}-0123456789\n")
        (credentials / name).chmod(0o600)
    local = config.replace(CREDENTIALS, f"{credentials}/").replace(
        "/var/lib/agent-node", str(tmp_path / "data")
    )
    path = tmp_path / "runtime.toml"
    path.write_text(local)
    done = run_cli("config", "check", "--config", str(path))
    assert done.returncode == 0, done.stderr
