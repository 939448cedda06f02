"""The connection to a NATS cluster, the mesh's stream and heads bucket on it, and `Link`: what
every loop on one connection shares.

Credentials (user/password, a creds file or an nkey seed file) go to the client only; they are
never logged (errors are logged by type and message, which nats-py writes without them).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError
from nats.js.kv import KeyValue

from node.config.model import MeshSection
from node.context import NodeContext
from node.sync.incidents import Incidents
from node.sync.nats.metrics import NatsMetrics
from node.sync.nats.raw import RawClient
from node.sync.nats.settings import differences
from node.sync.nats.subjects import (
    Bucket,
    all_subjects,
    bucket_name,
    inbox_prefix,
    kv_stream,
    stream_name,
)

log = logging.getLogger("agent-node.sync")
DUPLICATE_WINDOW_SECS = 120.0


@dataclass(frozen=True)
class Link:
    """One live connection and the node's parts its loops (publisher, consumer, heads) use."""

    ctx: NodeContext
    nc: RawClient
    js: JetStreamContext
    metrics: NatsMetrics
    incidents: Incidents


class OnLink:
    """A loop of one connection (nats/mesh.py starts a new one on every connect)."""

    def __init__(self, link: Link) -> None:
        self._ctx, self._nc, self._js = link.ctx, link.nc, link.js
        self._metrics, self._incidents = link.metrics, link.incidents


async def connect(
    mesh: MeshSection, node: str, on_reconnect: Callable[[], Awaitable[None]]
) -> RawClient:
    client = RawClient()

    async def error_cb(exc: Exception) -> None:
        log.warning("nats: %s: %s", type(exc).__name__, exc)

    async def disconnected_cb() -> None:
        if client.is_closed:  # this node closed it (a shutdown, a new connection): nothing wrong
            log.info("nats: connection closed")
        else:
            log.warning("nats: disconnected; reconnecting")

    async def reconnected_cb() -> None:
        log.info("nats: reconnected")
        await on_reconnect()

    options: dict[str, Any] = {
        "servers": mesh.nats_servers,
        "name": f"agent-node {node}",
        # replies come to this node's own prefix: its NATS user may read nothing else
        "inbox_prefix": inbox_prefix(node),
        "connect_timeout": 2,
        "reconnect_time_wait": 0.5,
        "max_reconnect_attempts": -1,
        "allow_reconnect": True,
        "error_cb": error_cb,
        "disconnected_cb": disconnected_cb,
        "reconnected_cb": reconnected_cb,
    }
    if mesh.nats_user is not None:
        options["user"], options["password"] = mesh.nats_user, mesh.nats_password
    if mesh.nats_creds_file is not None:
        options["user_credentials"] = mesh.nats_creds_file
    if mesh.nats_nkey_seed_file is not None:
        options["nkeys_seed"] = mesh.nats_nkey_seed_file
    await client.connect(**options)
    return client


async def ensure_stream(js: JetStreamContext, mesh: MeshSection) -> list[str]:
    """Create the mesh's stream when missing (every node asks; creating it twice with the same
    settings is harmless). An existing one is used whatever its settings (replication must go
    on), and each setting that differs from these is returned, to be reported."""
    name = stream_name(mesh.name)
    wanted = StreamConfig(
        name=name,
        subjects=[all_subjects(mesh.name)],
        storage=StorageType.FILE,
        num_replicas=mesh.stream_replicas,
        max_age=mesh.stream_max_age_secs or None,
        max_bytes=mesh.stream_max_bytes,
        discard=DiscardPolicy.OLD,
        # the server refuses a duplicate window longer than the stream's max age
        duplicate_window=min(DUPLICATE_WINDOW_SECS, mesh.stream_max_age_secs or 1e9),
    )
    try:
        found = await js.stream_info(name)
    except NotFoundError:
        await js.add_stream(wanted)
        log.info("nats: created stream %s (replicas %d)", name, mesh.stream_replicas)
        return []
    wrong = differences(found.config, wanted)
    kept, asked = float(found.config.max_age or 0.0), float(mesh.stream_max_age_secs or 0.0)
    if abs(kept - asked) > 1.0:
        shown = "for ever" if kept <= 0 else f"{kept:g} s"
        wrong.append(f"it keeps messages {shown}, not {asked:g} s (stream_max_age_secs)")
    return wrong


async def heads_kv(js: JetStreamContext, mesh: MeshSection) -> tuple[KeyValue, list[str]]:
    """The heads bucket (nats-py's layout, one value per key), created when missing, and each
    setting of an existing one that differs from that (used anyway, reported)."""
    bucket = bucket_name(mesh.name, Bucket.HEADS)
    try:
        kv = await js.key_value(bucket)
    except NotFoundError:
        kv = await js.create_key_value(
            bucket=bucket, history=1, replicas=mesh.stream_replicas, storage=StorageType.FILE
        )
        return kv, []
    found = await js.stream_info(kv_stream(bucket))
    wanted = StreamConfig(
        subjects=[f"$KV.{bucket}.>"],
        max_msgs_per_subject=1,
        discard=DiscardPolicy.NEW,
        num_replicas=mesh.stream_replicas,
        storage=StorageType.FILE,
    )
    return kv, differences(found.config, wanted)


def repair_of(stream: str, wrong: list[str]) -> str:
    """The finding's detail: what differs, and the operator's one command."""
    return (
        f"{stream} was made with other settings than this node makes it with: {'; '.join(wrong)}. "
        "This node keeps replicating through it. Repair: delete it while the nodes run "
        f"(`nats stream rm {stream}`): they make it again at once; what it held stays in every "
        "node's journal, and a node that missed some repairs it from its peers over HTTP "
        '(docs/mesh.md, "NATS JetStream transport")'
    )
