"""runtime.toml: defaults, and start-up failures that name the key and the file."""

import pytest

from node.config.load import load_config
from node.config.model import ConfigError
from tests.support import run_cli, write_config


def test_defaults_and_relative_paths(tmp_path):
    config = load_config(write_config(tmp_path, port=8099))
    assert config.node.data_dir == "data"
    assert config.data_path == (tmp_path / "data").resolve()
    assert config.node.sse_keepalive_secs == 15
    assert config.public_url == "http://127.0.0.1:8099"


def test_agent_section_per_design(tmp_path):
    config = load_config(
        write_config(
            tmp_path,
            """
[[agents]]
name = "payer"
component = "agents/payer.wasm"
fuel_per_tick = 50_000_000
[agents.capabilities]
spend = true
[agents.approval]
spend = true
timeout_secs = 30
[agents.grants]
domains = ["payments"]
[agents.http]
allow_hosts = ["127.0.0.1"]

[secrets.payments]
api_key = "s3cret"
""",
        )
    )
    payer = config.agent("payer")
    assert payer.is_gated("spend") and not payer.is_gated("http_fetch")
    assert payer.approval_timeout_secs == 30 and payer.tick_interval_ms == 1000
    assert payer.grants.domains == ["payments"] and config.secrets["payments"]["api_key"]


@pytest.mark.parametrize(
    ("extra", "mentions"),
    [
        ('[[agents]]\nname = "a"\ncomponent = "x.wasm"\nfule_per_tick = 5\n', "fule_per_tick"),
        (
            '[[agents]]\nname = "a"\ncomponent = "x.wasm"\ntick_interval_ms = "fast"\n',
            "tick_interval_ms",
        ),
        (
            '[[agents]]\nname = "a"\ncomponent = "x.wasm"\n[agents.approval]\ntimeout_secs = "x"\n',
            "timeout_secs",
        ),
        (
            '[[agents]]\nname = "a"\ncomponent = "x.wasm"\n[agents.approval]\nspend = 3\n',
            "approval.spend",
        ),
        ('[[agents]]\nname = "bad name"\ncomponent = "x.wasm"\n', "name"),
        ("[surprise]\nx = 1\n", "surprise"),
        ('[[peers]]\nname = "node-b"\nurl = "ftp://x"\ntoken = "t"\n', "peers[0].url"),
        ('[[auth.tokens]]\nname = "short"\ntoken = "abc"\nscopes = ["read"]\n', "at least 16"),
        ('[[auth.tokens]]\nname = "x"\ntoken = "0123456789abcdef0"\nscopes = ["root"]\n', "scopes"),
    ],
)
def test_bad_keys_are_named_with_the_file(tmp_path, extra, mentions):
    path = write_config(tmp_path, extra)
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert str(path) in str(error.value)
    assert mentions in str(error.value)


def test_run_refuses_to_start_on_an_unknown_key(tmp_path):
    path = write_config(tmp_path, "[node_extra]\nfoo = 1\n")
    result = run_cli("run", "--config", str(path), timeout=60)
    assert result.returncode == 2
    assert "node_extra" in result.stderr and str(path) in result.stderr


def test_missing_and_broken_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("[node\nname=")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(broken)
