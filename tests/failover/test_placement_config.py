"""A placement set in runtime.toml is checked like the deploy API's (node/config/model.py)."""

from __future__ import annotations

import pytest

from node.config.load import load_config
from node.config.model import ConfigError
from tests.support import write_config

NATS = '\n[mesh]\ntransport = "nats"\nnats_servers = ["nats://127.0.0.1:4222"]\n'


def agent(placement: str, component: str = "registry:counter@1.0.0") -> str:
    return f'\n[[agents]]\nname = "counter"\ncomponent = "{component}"\nplacement = {placement}\n'


def test_a_placement_set_with_this_node_is_kept(tmp_path):
    config = load_config(write_config(tmp_path, NATS + agent('["node-a", "node-b"]')))
    assert config.agents[0].placement == ["node-a", "node-b"]
    assert load_config(write_config(tmp_path / "d", agent("[]"))).agents[0].placement == []


@pytest.mark.parametrize(
    ("extra", "mentions"),
    [
        (NATS + agent('["node-b", "node-c"]'), "must include this node ('node-a')"),
        (NATS + agent('["node-a", "node-a"]'), "the node 'node-a' is named twice"),
        (agent('["node-a", "node-b"]'), 'more than one node needs [mesh] transport = "nats"'),
        (NATS + agent(str(["node-a", *(f"n{i}" for i in range(100))])), "at most 100 node names"),
        (NATS + agent('["node-a", "no de"]'), "agents[0].placement"),
        (
            NATS + agent('["node-a", "node-b"]', "c.wasm"),
            "a placed agent's component comes from the registry",
        ),
    ],
)
def test_a_bad_placement_set_stops_the_start_saying_why(tmp_path, extra, mentions):
    with pytest.raises(ConfigError) as caught:
        load_config(write_config(tmp_path, extra))
    assert mentions in str(caught.value)
