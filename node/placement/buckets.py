"""Opening (or creating) the placement buckets, and reading one key from a bucket's leader.

The buckets are plain JetStream streams in the layout nats-py and the `nats` CLI use (a KV
bucket is the stream `KV_<bucket>` on `$KV.<bucket>.>`), created here rather than by nats-py so
that what matters is fixed: per-message TTLs are not allowed (a member cannot stretch a key's
life past the bucket's TTL), nor roll-ups (a member's `Nats-Rollup: all` would empty the
bucket) nor purges; deletes are markers; reads go to the stream's leader (a direct get may be
answered by a replica that fell behind). A bucket that exists was made by whoever came first
(an operator, an older version, or a member of the mesh): it is used only when its settings
are the ones above and its TTL lies in the range this node's config allows (`BucketRules`),
else `BucketError` says what differs (a member that creates the leases bucket with a TTL of a
year must not make every lease last a year).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RawStreamMsg, StorageType, StreamConfig, StreamInfo
from nats.js.errors import APIError, NotFoundError
from nats.js.kv import KeyValue

from node.sync.nats.settings import differences
from node.sync.nats.subjects import kv_stream, kv_subject

log = logging.getLogger("agent-node.placement")
# the server refuses a duplicate window longer than the stream's max age
DUPLICATE_WINDOW_SECS = 120.0
KV_DELETE_HEADER = "KV-Operation"


class BucketError(Exception):
    """A bucket that cannot be used as it is: its settings are not the ones this node needs."""


@dataclass(frozen=True)
class BucketRules:
    """What this node creates a bucket with (`ttl`), and the TTLs it accepts in one it finds."""

    ttl: float
    ttl_range: tuple[float, float]


async def open_kv(
    js: JetStreamContext,
    bucket: str,
    rules: BucketRules,
    *,
    replicas: int,
    max_value_bytes: int,
    timeout: float,
) -> tuple[KeyValue, float]:
    """The bucket (created by `rules` when missing) and its TTL as the server keeps it;
    BucketError when the one found has other settings."""
    ttl, stream = rules.ttl, kv_stream(bucket)
    wanted = StreamConfig(
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
    )
    async with asyncio.timeout(timeout):
        info = await _info_or_create(js, wanted)
    check_settings(stream, info, rules.ttl_range, max_value_bytes, wanted)
    kept = float(info.config.max_age or 0.0)
    kv = KeyValue(name=bucket, stream=stream, pre=f"$KV.{bucket}.", js=js, direct=False)
    return kv, float(kept)


def check_settings(
    stream: str,
    info: StreamInfo,
    ttl_range: tuple[float, float] | None,
    max_value_bytes: int | None,
    wanted: StreamConfig | None = None,
) -> None:
    """BucketError naming each setting that differs from the ones this node creates the
    bucket with (`wanted`; a member could have made it first), so that nothing written there
    lives past its TTL, is swept by a roll-up, a purge or a work queue, is deleted other than
    by a marker, or is refused by narrowed subjects or limits."""
    config = info.config
    wrong = [
        what
        for what, bad in (
            ("it allows roll-ups", config.allow_rollup_hdrs),
            ("it allows per-message TTLs", config.allow_msg_ttl),
            ("it allows purges", not config.deny_purge),
            ("it allows deleting messages", not config.deny_delete),
            ("it is sealed (it takes no message)", config.sealed and wanted is None),
            (
                f"it keeps {config.max_msgs_per_subject} messages per key, not 1",
                ttl_range is not None and config.max_msgs_per_subject != 1,
            ),
            (
                f"its messages may be {config.max_msg_size} bytes, over {max_value_bytes}",
                max_value_bytes is not None
                and (config.max_msg_size or -1) not in range(1, max_value_bytes + 1),
            ),
        )
        if bad
    ]
    if wanted is not None:
        wrong += differences(config, wanted)
    if ttl_range is not None:
        kept = float(config.max_age or 0.0)
        low, high = ttl_range
        if not low <= kept <= high:
            forever = "for ever" if kept <= 0 else f"{kept:g} s"
            wrong.append(f"it keeps keys {forever}, not {low:g}-{high:g} s")
    if wrong:
        raise BucketError(
            f"{stream} is not usable: {'; '.join(wrong)}. It was made by someone other than "
            "this version of agent-node with this config (an operator, or a member of the "
            f"mesh): delete it (`nats stream rm {stream}`) and the nodes make it again "
            '(docs/mesh.md, "Placement and failover")'
        )


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
