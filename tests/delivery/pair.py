"""Two real nodes in this process for the outbox's failover tests: node-a, home of one agent's
journal (configured there), and node-b, a node of its placement set that the mesh's own HTTP
sync replicates the journal to, with real keys and signatures."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import TestServer
from nacl.signing import SigningKey

from eventstore.keys import public_key_multibase
from harness.mesh import peer_toml
from node.app import build_app
from node.context import CONTEXT
from projections import catalogue as c
from tests.support import free_port, make_config

KEY_A, KEY_B = SigningKey(bytes([1]) * 32), SigningKey(bytes([2]) * 32)
LIMITS = c.AgentLimits(
    tick_interval_ms=1000, fuel_per_tick=1, memory_limit_mb=64, tick_timeout_ms=1
)


def peer(name: str, key: SigningKey, port: int) -> str:
    """The other node as a mesh peer: its key, and the sync tokens of both directions."""
    other = "node-b" if name == "node-a" else "node-a"
    return peer_toml(
        name,
        f"http://127.0.0.1:{port}",
        accepts=f"sync-token-from-{name}-0001",
        presents=f"sync-token-from-{other}-0001",
        public_key=public_key_multibase(key.verify_key),
    )


async def placed_pair(
    aiohttp_server, tmp_path: Path, name: str, agent: str, extra: str
) -> tuple[web.Application, TestServer, web.Application]:
    """node-a (with `agent`, the toml of agent `name`, and `extra`) and node-b (with `extra`),
    peers of each other, the agent placed on both: (node-a's app, its server, node-b's app)."""
    port_a, port_b = free_port(), free_port()
    config_a = make_config(
        tmp_path / "a", agent + extra + peer("node-b", KEY_B, port_b), port=port_a
    )
    config_b = make_config(
        tmp_path / "b", extra + peer("node-a", KEY_A, port_a), name="node-b", port=port_b
    )
    app_a = build_app(config_a, key=KEY_A)
    server_a = await aiohttp_server(app_a, port=port_a)
    app_b = build_app(config_b, key=KEY_B)
    await aiohttp_server(app_b, port=port_b)
    definition = c.AgentDefinition(component=f"registry:{name}@1.0.0", sha256="", limits=LIMITS)
    placed = c.AgentPlaced(placement=["node-a", "node-b"], definition=definition)
    await app_a[CONTEXT].store.append(name, *c.event_of(placed))
    return app_a, server_a, app_b
