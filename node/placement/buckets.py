"""Opening (or creating) the placement buckets, and reading one key from a bucket's leader.

The buckets are plain JetStream streams in the layout nats-py and the `nats` CLI use (a KV
bucket is the stream `KV_<bucket>` on `$KV.<bucket>.>`), created here rather than by nats-py so
that what matters is fixed: per-message TTLs are not allowed (a member cannot stretch a key's
life past the bucket's TTL), nor roll-ups (a member's `Nats-Rollup: all` would empty the
bucket) nor purges; deletes are markers; reads go to the stream's leader (a direct get may be
answered by a replica that fell behind). A bucket that exists is used as it is: its TTL,
not this node's config, is what the callers compute with.
"""

from __future__ import annotations

import asyncio
import logging

from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RawStreamMsg, StorageType, StreamConfig, StreamInfo
from nats.js.errors import APIError, NotFoundError
from nats.js.kv import KeyValue

from node.sync.nats_subjects import kv_stream, kv_subject

log = logging.getLogger("agent-node.placement")
# the server refuses a duplicate window longer than the stream's max age
DUPLICATE_WINDOW_SECS = 120.0
KV_DELETE_HEADER = "KV-Operation"


class BucketError(Exception):
    """A bucket that cannot be used as it is (no TTL where one is needed, not a KV bucket)."""


async def open_kv(
    js: JetStreamContext,
    bucket: str,
    *,
    ttl: float,
    replicas: int,
    max_value_bytes: int,
    timeout: float,
) -> tuple[KeyValue, float]:
    """The bucket (created with `ttl` when missing) and its TTL as the server keeps it."""
    stream = kv_stream(bucket)
    async with asyncio.timeout(timeout):
        info = await _info_or_create(
            js,
            StreamConfig(
                name=stream,
                subjects=[f"$KV.{bucket}.>"],
                allow_direct=False,
                allow_rollup_hdrs=False,  # a member's `Nats-Rollup: all` would wipe the bucket
                allow_msg_ttl=False,
                deny_delete=True,
                deny_purge=True,
                discard=DiscardPolicy.NEW,
                duplicate_window=min(DUPLICATE_WINDOW_SECS, ttl),
                max_age=ttl,
                max_msg_size=max_value_bytes,
                max_msgs_per_subject=1,
                num_replicas=replicas,
                storage=StorageType.FILE,
            ),
        )
    if info.config.max_msgs_per_subject < 1:
        raise BucketError(f"{stream} is not a key-value bucket")
    loose = [
        what
        for what, allowed in (
            ("roll-ups", info.config.allow_rollup_hdrs),
            ("per-message TTLs", info.config.allow_msg_ttl),
            ("purges", not info.config.deny_purge),
        )
        if allowed
    ]
    if loose:  # made by someone else (the operator, an older version, a member): left alone
        log.warning(
            "placement: %s allows %s: a member could empty it or keep keys past its TTL; "
            'recreate it (docs/mesh.md, "Placement and failover")',
            stream,
            ", ".join(loose),
        )
    kept = info.config.max_age or 0.0
    if kept <= 0:
        raise BucketError(f"{stream} keeps its keys forever (no max age): it cannot hold leases")
    kv = KeyValue(name=bucket, stream=stream, pre=f"$KV.{bucket}.", js=js, direct=False)
    return kv, float(kept)


async def info_or_create(js: JetStreamContext, config: StreamConfig, timeout: float) -> StreamInfo:
    async with asyncio.timeout(timeout):
        return await _info_or_create(js, config)


async def _info_or_create(js: JetStreamContext, config: StreamConfig) -> StreamInfo:
    """Every node asks; creating it twice with the same settings is harmless, and when two
    nodes race with different settings the first one's stand (read again)."""
    assert config.name is not None
    try:
        return await js.stream_info(config.name)
    except NotFoundError:
        pass
    try:
        return await js.add_stream(config)
    except APIError:
        return await js.stream_info(config.name)


async def last_value(
    js: JetStreamContext, bucket: str, key: str, timeout: float
) -> RawStreamMsg | None:
    """The key's current message from the stream's leader, or None when it has none or its
    last is a delete marker."""
    try:
        async with asyncio.timeout(timeout):
            msg = await js.get_msg(kv_stream(bucket), subject=kv_subject(bucket, key))
    except NotFoundError:
        return None
    if msg.headers and msg.headers.get(KV_DELETE_HEADER) in ("DEL", "PURGE"):
        return None
    return msg
