"""Meshes of real nodes: every node's config listing the others as peers (tokens both ways,
keys pinned), journals filled in bulk while their node is stopped, and signed chains of
envelopes as a peer pushes them."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

from nacl.signing import SigningKey

from eventstore.envelope import Event, digest_of, encode_event, sign, utc_now
from eventstore.keys import load_or_create_key, public_key_multibase
from eventstore.store import NewEvent
from harness.node import NodeProcess, free_port, write_config
from node.config.load import load_config

# sync settings that make a test or a bench mesh converge in seconds, not minutes
SYNC_TUNING = """
[sync]
batch_size = 200
backoff_initial_secs = 0.05
backoff_max_secs = 0.5
heartbeat_secs = 0.5
request_timeout_secs = 10
ack_flush_secs = 0.05
"""


def peer_token(sender: str, receiver: str) -> str:
    """The token `sender` presents to `receiver` (the receiver names its entry after sender)."""
    return f"sync-{sender}-to-{receiver}-000000"


def peer_toml(peer: str, url: str, *, accepts: str, presents: str, public_key: str = "") -> str:
    """A node's config lines for mesh peer `peer`: the token it accepts from the peer and how it
    reaches the peer (with the peer's pinned key, if given)."""
    toml = (
        f'\n[[auth.tokens]]\nname = "{peer}"\ntoken = "{accepts}"\nscopes = ["sync"]\n'
        f'\n[[peers]]\nname = "{peer}"\nurl = "{url}"\ntoken = "{presents}"\n'
    )
    return toml + (f'public_key = "{public_key}"\n' if public_key else "")


def write_mesh(
    root: Path, names: list[str], *, extra: str = SYNC_TUNING, with_keys: bool = True
) -> dict[str, Path]:
    """Config files for a full mesh: every node lists every other as a peer, with tokens.

    With `with_keys`, each node's key is created up front and given as `public_key`; without,
    peers must learn keys from `/.well-known/did.json`.
    """
    ports = {name: free_port() for name in names}
    keys = {name: load_or_create_key(root / name / "data") for name in names}
    paths = {}
    for name in names:
        toml = [extra]
        for other in (n for n in names if n != name):
            toml.append(
                peer_toml(
                    other,
                    f"http://127.0.0.1:{ports[other]}",
                    accepts=peer_token(other, name),
                    presents=peer_token(name, other),
                    public_key=public_key_multibase(keys[other].verify_key) if with_keys else "",
                )
            )
        paths[name] = write_config(root / name, "".join(toml), name=name, port=ports[name])
    return paths


def prefill(config_path: Path, journals: dict[str, int], chunk: int = 1000) -> None:
    """Write findings straight into a stopped node's journals: bulk content in seconds."""
    from node.app import open_store

    config = load_config(config_path)

    def finding(stream: str, n: int) -> NewEvent:
        return NewEvent(stream, "finding", {"severity": "info", "title": f"{stream} #{n}"})

    async def run() -> None:
        store = open_store(config, load_or_create_key(config.data_path))
        store.start()
        try:
            for stream, count in journals.items():
                head = store.head(stream)
                first = (head.seq if head else 0) + 1
                for start in range(first, first + count, chunk):
                    end = min(start + chunk, first + count)
                    await store.append_many([finding(stream, n) for n in range(start, end)])
        finally:
            await store.close()

    asyncio.run(run())


def signed_chain(
    key: SigningKey,
    origin: str,
    stream: str,
    count: int,
    *,
    start: int = 1,
    prev: str = "",
    data: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """`count` envelopes (as pushed) of a valid chain signed by `key`, without any store."""
    out: list[dict[str, Any]] = []
    for seq in range(start, start + count):
        event = Event(
            type="finding",
            ts=utc_now(),
            origin=origin,
            prev=prev,
            data=data or {"severity": "info", "title": f"{stream} #{seq}", "detail": ""},
        )
        payload = encode_event(event)
        digest = digest_of(payload)
        signature = sign(key, stream, seq, digest)
        out.append(
            {
                "seq": seq,
                "agent": stream,
                "payload": base64.b64encode(payload).decode(),
                "signature": "ed25519:" + base64.b64encode(signature).decode(),
            }
        )
        prev = "sha256:" + digest.hex()
    return out


class Mesh:
    """The node processes of one test or bench, stopped (SIGKILL) at the end whatever happened."""

    def __init__(self, root: Path, names: list[str], **kwargs: Any) -> None:
        self.paths = write_mesh(root, names, **kwargs)
        self.nodes = {name: NodeProcess(path) for name, path in self.paths.items()}

    def __getitem__(self, name: str) -> NodeProcess:
        return self.nodes[name]

    def start(self, *names: str) -> None:
        for name in names or self.nodes:
            self.nodes[name].start()

    def stop_all(self) -> None:
        for node in self.nodes.values():
            if node.proc and node.proc.poll() is None:
                assert node.terminate() == 0

    def kill_all(self) -> None:
        for node in self.nodes.values():
            node.kill()
