"""`[[hosting]] owner` (issue 51): `config check` refuses an entry that gives a stranger's
agent of that name something worth taking (a secret domain, an ungated capability, network
hosts) without naming whose agent it is."""

from __future__ import annotations

import pytest

from node.config.load import load_config
from node.config.model import ConfigError
from tests.support import write_config

MESH = '\n[mesh]\ntransport = "nats"\nnats_servers = ["nats://127.0.0.1:4222"]\n'
SECRETS = '\n[secrets.payments]\napi_key = "pay-0123456789abcdef"\n'


@pytest.mark.parametrize(
    ("entry", "named"),
    [
        ('[hosting.grants]\ndomains = ["payments"]\n', "the secret domains ['payments']"),
        ("[hosting.capabilities]\nspend = true\n", "the capabilities ['spend'] without approval"),
        ('[hosting.http]\nallow_hosts = ["api.example:443"]\n', "the network hosts"),
    ],
)
def test_an_entry_granting_what_a_stranger_could_use_must_name_its_owner(tmp_path, entry, named):
    text = MESH + SECRETS + f'\n[[hosting]]\nagent = "payer"\n{entry}'
    with pytest.raises(ConfigError) as error:
        load_config(write_config(tmp_path, text))
    assert "hosting[0].owner: it grants " + named in str(error.value)
    scoped = text.replace('agent = "payer"\n', 'agent = "payer"\nowner = "node-a"\n')
    assert load_config(write_config(tmp_path / "scoped", scoped)).hosting[0].owner == "node-a"


def test_a_bare_or_gated_entry_needs_no_owner(tmp_path):
    text = (
        MESH
        + '\n[[hosting]]\nagent = "reporter"\n'
        + '\n[[hosting]]\nagent = "payer"\n[hosting.capabilities]\nspend = true\n'
        + "[hosting.approval]\nspend = true\n"
    )
    config = load_config(write_config(tmp_path, text))
    assert [h.owner for h in config.hosting] == [None, None]
