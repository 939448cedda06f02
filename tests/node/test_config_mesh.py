"""[mesh]: the NATS transport's keys are checked when used, and credentials never echoed."""

import pytest

from node.config.load import load_config
from node.config.model import ConfigError
from tests.support import write_config

NATS = '\n[mesh]\ntransport = "nats"\n'


def test_http_is_the_default_and_ignores_nats_keys(tmp_path):
    config = load_config(write_config(tmp_path, '\n[mesh]\nnats_servers = ["bogus"]\n'))
    assert config.mesh.transport == "http"
    assert config.mesh.name == "default"


@pytest.mark.parametrize(
    ("extra", "mentions"),
    [
        ("", "mesh.nats_servers: give at least one server URL"),
        ('nats_servers = ["http://x:4222"]\n', "mesh.nats_servers[0]: expected nats://"),
        (
            'nats_servers = ["nats://x:4222"]\nnats_user = "a"\n',
            "nats_user and nats_password (or nats_password_file) go together",
        ),
        (
            'nats_servers = ["nats://x:4222"]\nnats_user = "a"\nnats_password = "p-secret-1"\n'
            'nats_creds_file = "c.creds"\n',
            "give one of nats_user (with a password), nats_creds_file or nats_nkey_seed_file",
        ),
        (
            'nats_servers = ["nats://x:4222"]\nnats_nkey_seed_file = "missing.nk"\n',
            "mesh.nats_nkey_seed_file: missing.nk is not a readable file",
        ),
        (
            'nats_servers = ["nats://x:4222"]\nnats_user = "a"\nnats_password_file = "nope"\n',
            "mesh.nats_password_file: cannot read",
        ),
        ('name = "a.b"\n', "mesh.name"),
        ('nats_servers = ["nats://x:4222"]\nrepair_timeout_secs = 0\n', "repair_timeout_secs"),
        ('nats_servers = ["nats://x:4222"]\nrepair_timeout_secs = 301\n', "repair_timeout_secs"),
    ],
)
def test_bad_nats_settings_are_named(tmp_path, extra, mentions):
    with pytest.raises(ConfigError) as error:
        load_config(write_config(tmp_path, NATS + extra))
    assert mentions in str(error.value)
    assert "p-secret-1" not in str(error.value)


def test_password_file_is_read_relative_to_the_config(tmp_path):
    (tmp_path / "nats-pw").write_text("s3cret-password\n")
    (tmp_path / "nats-pw").chmod(0o600)
    config = load_config(
        write_config(
            tmp_path,
            NATS + 'nats_servers = ["nats://127.0.0.1:4222", "tls://n2:4222"]\n'
            'nats_user = "node-a"\nnats_password_file = "nats-pw"\nstream_replicas = 3\n',
        )
    )
    assert config.mesh.nats_password == "s3cret-password"
    assert config.mesh.stream_replicas == 3
