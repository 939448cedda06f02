"""One real node (node-a, a process on a real nats-server) that shows both sides of placement,
for the console's and the CLI's tests of what a node tells about a placed agent:

- `counter`, deployed here through the API and placed on node-a, node-b and node-c: node-a is
  its home and holds its lease. node-b and node-c are no processes: the test writes node-b's
  advert (ready to host `counter`) into the mesh's bucket; node-c has none (it is dead), so
  only node-b is a move target.
- `ticker`, a journal pushed by node-b with real signatures (node-c deployed it, handed its
  ownership and its journal to node-b, which upgraded and stopped it as its owner: "The owner
  decides, the home runs", docs/mesh.md), placed on node-c, node-b and node-a. node-a has no
  consent to host it ([[hosting]]), so it keeps a replica; node-b's lease is not in the
  bucket unless the test writes it, so its home is suspect. The operators' names are hostile.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import msgspec
import nats
from nacl.signing import SigningKey
from nats.js.api import DiscardPolicy
from nats.js.errors import KeyNotFoundError

from eventstore.envelope import Event, digest_of, encode_event, sign, utc_now
from eventstore.keys import public_key_multibase
from harness.failover import publish_component
from harness.mesh import SYNC_TUNING, peer_token, peer_toml
from harness.nats import NatsServer, nats_mesh_toml
from harness.node import NodeProcess, auth, free_port, write_config
from node.placement.leases import LeaseRecord, lease_key, sign_record
from node.sync.nats.subjects import Bucket, bucket_name, stream_name, token
from projections import catalogue as c
from tests.polling import wait_until

PEERS = {name: SigningKey(bytes([n]) * 32) for n, name in enumerate(("node-b", "node-c"), 2)}
MESH = "default"
HOME_SET = ["node-a", "node-b", "node-c"]
TICKER_SET = ["node-c", "node-b", "node-a"]
# clears the screen, returns to the row's start, a C1 CSI, reversed text, a zero-width space
DEPLOYER = "\x1b[2J\rroot\x9b2J \u202enimda\u200b"
DEPLOYER_SHOWN = "\\x1b[2J\\rroot\\x9b2J \\u202enimda\\u200b"
STOPPER = "mallory\n\u202eecila"
STOPPER_SHOWN = "mallory\\n\\u202eecila"
INVISIBLE = ("\x1b", "\r", "\x9b", "\u202e", "\u200b")
LIMITS = c.AgentLimits(
    tick_interval_ms=1000, fuel_per_tick=1_000_000, memory_limit_mb=16, tick_timeout_ms=1000
)
TICKER = c.AgentDefinition(component="registry:ticker@1.2.0", sha256="", limits=LIMITS)


@dataclass
class PlacedViews:
    node: NodeProcess
    nats_url: str

    def advert(self, node: str, hosts: list[str]) -> None:
        """`node`'s advert as its loop puts it: ready to host `hosts` now."""
        advert = {"node": node, "hosts": hosts, "free_slots": 4, "at": 0.0}
        self._kv(Bucket.NODES, "put", token(node), msgspec.json.encode(advert))

    def withdraw(self, node: str) -> None:
        self._kv(Bucket.NODES, "delete", token(node))

    def lapse(self, agent: str, holder: str) -> None:
        """`holder`'s lease record of `agent` gone, as when it stops renewing it."""
        self._kv(Bucket.LEASES, "delete", lease_key(agent, holder))

    def home_lease(self, agent: str, holder: str, epoch: int) -> None:
        """`holder`'s signed lease record of `agent` at `epoch`, as its renewals write it."""
        record = sign_record(PEERS[holder], LeaseRecord(agent, holder, epoch, 0.0))
        self._kv(Bucket.LEASES, "put", lease_key(agent, holder), record)

    def lease_of(self, agent: str, holder: str) -> bytes | None:
        """`holder`'s lease record of `agent` in the bucket, if any."""
        try:
            entry = self._kv(Bucket.LEASES, "get", lease_key(agent, holder))
        except KeyNotFoundError:
            return None
        return entry.value if entry is not None else None

    def stream_full(self, full: bool) -> None:
        """The mesh's stream takes no more messages (as when it reaches its limit), or again."""

        async def limit(nc: nats.NATS) -> None:
            js = nc.jetstream()
            info = await js.stream_info(stream_name(MESH))
            info.config.max_msgs = info.state.messages if full else -1
            info.config.discard = DiscardPolicy.NEW
            await js.update_stream(info.config)

        self._run(limit)

    def _kv(self, bucket: Bucket, verb: str, key: str, *value: bytes) -> Any:
        async def call(nc: nats.NATS) -> Any:
            kv = await nc.jetstream().key_value(bucket_name(MESH, bucket))
            return await getattr(kv, verb)(key, *value)

        return self._run(call)

    def _run(self, work: Callable[[nats.NATS], Awaitable[Any]]) -> Any:
        async def connected() -> Any:
            nc = await nats.connect(self.nats_url, connect_timeout=5)
            try:
                return await work(nc)
            finally:
                await nc.close()

        # in a thread of its own: Playwright's sync API keeps an event loop in this one
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, connected()).result(30)

    def agent(self, name: str) -> dict[str, Any]:
        with self.node.client() as client:
            answer = client.get(f"/api/v1/agents/{name}", timeout=10)
        assert answer.status_code == 200, answer.text
        agent: dict[str, Any] = answer.json()
        return agent


class Chain:
    """One journal's envelopes as a peer pushes them, each signed by the node that wrote it."""

    def __init__(self, stream: str) -> None:
        self.stream = stream
        self.prev = ""
        self.envelopes: list[dict[str, Any]] = []

    def add(self, origin: str, payload: c.Payload) -> None:
        kind, data = c.event_of(payload)
        raw = encode_event(Event(type=kind, ts=utc_now(), origin=origin, prev=self.prev, data=data))
        digest = digest_of(raw)
        self.prev = "sha256:" + digest.hex()
        seq = len(self.envelopes) + 1
        signature = sign(PEERS[origin], self.stream, seq, digest)
        self.envelopes.append(
            {
                "seq": seq,
                "agent": self.stream,
                "payload": base64.b64encode(raw).decode(),
                "signature": "ed25519:" + base64.b64encode(signature).decode(),
            }
        )


def ticker_journal() -> list[dict[str, Any]]:
    """Deployed on node-c (revision 1, by alice), handed to node-b (its ownership first, signed
    by node-c while it is the owner and the home, then its journal), upgraded there (revision 2)
    and stopped by node-b as the owner, by operators whose names a hostile member chose."""
    chain = Chain("ticker")
    placed = {"placement": TICKER_SET, "definition": TICKER}
    first = msgspec.structs.replace(TICKER, component="registry:ticker@1.0.0")
    chain.add(
        "node-c",
        c.AgentPlaced(placement=TICKER_SET, definition=first, revision=1, operator="alice"),
    )
    chain.add("node-c", c.AgentOwnerHanded(to="node-b", operator="alice"))
    chain.add("node-c", c.JournalHandoff(to="node-b", epoch=1))
    chain.add("node-b", c.AgentMovedIn(epoch=1, from_node="node-c", reason="handoff"))
    chain.add(
        "node-b",
        c.AgentPlaced(**placed, epoch=1, revision=2, operator=DEPLOYER, change="upgraded"),
    )
    chain.add("node-b", c.AgentHalted(operator=STOPPER))
    return chain.envelopes


@contextlib.contextmanager
def placed_views(root: Path, counter_wasm: Path) -> Iterator[PlacedViews]:
    """The node with both agents as the module's docstring says (for a module fixture)."""
    from node.runtime.compiled_cache import COMPILED_CACHE_ENV
    from tests.runtime_support import COMPILED_CACHE

    os.environ[COMPILED_CACHE_ENV] = str(COMPILED_CACHE)
    server = NatsServer(root / "nats", "n0").start()
    try:
        peers = "".join(
            peer_toml(
                name,
                f"http://127.0.0.1:{free_port()}",
                accepts=peer_token(name, "node-a"),
                presents=peer_token("node-a", name),
                public_key=public_key_multibase(key.verify_key),
            )
            for name, key in PEERS.items()
        )
        # adverts live 3 intervals: long enough for the tests' own; a lease lapses in 4 s
        mesh = nats_mesh_toml([server.url]) + "advert_interval_secs = 30\nlease_ttl_secs = 4\n"
        node = NodeProcess(write_config(root / "node-a", SYNC_TUNING + mesh + peers))
        with node:
            component = publish_component(node, counter_wasm)
            _deploy(node, component)
            with node.client() as client:
                pushed = client.post(
                    "/api/v1/sync/envelopes",
                    json={"peer_id": "node-b", "envelopes": ticker_journal()},
                    headers=auth(peer_token("node-b", "node-a")),
                )
            assert pushed.json()["accepted"] == 6, pushed.text
            yield PlacedViews(node, server.url)
    finally:
        server.kill()


def _deploy(node: NodeProcess, component: str) -> None:
    """`counter` placed on HOME_SET, running here (asked again while the link comes up)."""
    body = {"component": component, "tick_interval_ms": 1000, "placement": HOME_SET}

    def deployed() -> bool:
        with node.client() as client:
            answer = client.put("/api/v1/agents/counter", json=body, timeout=120)
        if answer.status_code == 503 and "not connected" in answer.text:
            return False
        assert answer.status_code == 201, answer.text
        return True

    wait_until(deployed, 30, "node-a takes the deploy (its NATS link up)", 0.2)

    def runs() -> bool:
        with node.client() as client:
            view = client.get("/api/v1/agents/counter").json()
        return bool(view["placement"]["lease"]) and view["status"] in ("running", "idle")

    wait_until(runs, 30, "node-a runs counter", 0.2, retry_on=(httpx.HTTPError,))
