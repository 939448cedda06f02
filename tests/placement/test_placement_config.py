"""[mesh]'s placement keys: defaults, and bounds named when crossed."""

import pytest

from node.config.load import load_config
from node.config.model import ConfigError
from tests.support import write_config


def test_placement_keys_have_their_defaults(tmp_path):
    mesh = load_config(write_config(tmp_path)).mesh
    assert (mesh.lease_ttl_secs, mesh.advert_interval_secs, mesh.agent_slots) == (10.0, 2.0, 100)


@pytest.mark.parametrize(
    "line",
    [
        "lease_ttl_secs = 0.5",
        "lease_ttl_secs = 301",
        "advert_interval_secs = 0",
        "advert_interval_secs = 61",
        "agent_slots = -1",
    ],
)
def test_out_of_bounds_placement_keys_are_named(tmp_path, line):
    with pytest.raises(ConfigError) as error:
        load_config(write_config(tmp_path, f"\n[mesh]\n{line}\n"))
    assert f"mesh.{line.split(' ')[0]}" in str(error.value)
