"""[delivery] and [notifications] in runtime.toml: checked at load, every problem naming its
key and never the URL or secret (they may hold credentials); files read for `*_file`."""

from __future__ import annotations

import base64

import pytest

from node.cli.config import config_schema
from node.config.load import load_config
from node.config.model import ConfigError
from tests.support import write_config

SECRET = "whsec_" + base64.b64encode(b"s" * 32).decode()
HIDDEN_URL = "https://hooks.example/T0/B0/hidden-path-token"


def load(tmp_path, extra: str):
    return load_config(write_config(tmp_path, extra))


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        ('[delivery]\nallow_networks = ["10.0.0.0/33"]', "delivery.allow_networks[0]"),
        ("[delivery]\nbackoff_initial_secs = 10\nbackoff_max_secs = 1", "backoff_max_secs"),
        (
            f'[[notifications.channels]]\nname = "a"\nkind = "webhook"\nurl = "{HIDDEN_URL}"',
            "give one of `secret` or `secret_file`",
        ),
        (
            f'[[notifications.channels]]\nname = "a"\nkind = "webhook"\nurl = "{HIDDEN_URL}"\n'
            'secret = "whsec_short"',
            "notifications.channels[0].secret",
        ),
        (
            f'[[notifications.channels]]\nname = "a"\nkind = "apprise"\nurl = "{HIDDEN_URL}"\n'
            f'secret = "{SECRET}"',
            "only a webhook channel has a `secret`",
        ),
        ('[[notifications.channels]]\nname = "a"\nkind = "apprise"', "give one of `url`"),
        (
            f'[[notifications.channels]]\nname = "a"\nkind = "webhook"\nurl = "ftp://{HIDDEN_URL[8:]}"\n'
            f'secret = "{SECRET}"',
            "starts with http:// or https://",
        ),
        ('[notifications]\nconsole_url = "console"', "notifications.console_url"),
    ],
)
def test_bad_delivery_keys_are_named_and_secrets_never_echoed(tmp_path, extra, problem):
    with pytest.raises(ConfigError) as raised:
        load(tmp_path, extra)
    assert problem in str(raised.value)
    assert "hidden-path-token" not in str(raised.value) and SECRET not in str(raised.value)


def test_channel_url_and_secret_come_from_files(tmp_path):
    (tmp_path / "url").write_text(HIDDEN_URL + "\n")
    (tmp_path / "secret").write_text(SECRET)
    for name in ("url", "secret"):
        (tmp_path / name).chmod(0o600)
    config = load(
        tmp_path,
        '[[notifications.channels]]\nname = "a"\nkind = "webhook"\n'
        'url_file = "url"\nsecret_file = "secret"\non = ["escalated"]',
    )
    (channel,) = config.notifications.channels
    assert (channel.url, channel.secret, channel.on) == (HIDDEN_URL, SECRET, ["escalated"])
    assert config.delivery.allow_networks == [] and config.notifications.escalate_before_secs == 60
    schema = config_schema()["$defs"]
    assert "allow_networks" in schema["DeliverySection"]["properties"]
    assert schema["ChannelConfig"]["properties"]["on"]["description"]
