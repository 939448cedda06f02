"""The lease log: every lease write of a node is also a message in the mesh's stream, so that a
takeover is judged by the stream alone, the same on every node whenever it reads it.

A node's lease record of a journal (node/placement/records.py: signed by its node key) goes, at
its acquire and every renewal, first to the stream on the subject
`mesh.<mesh>.env.<hex(node)>.<hex(journal)>.lease` (node/sync/nats/subjects.py; the node's own
NATS permission, no envelope subject), then to the leases bucket. The server stamps it
(`Nats-Time-Stamp`) when it stores it. The rule every node judges by:

    the lease of N on J is live at stream position p iff the stream holds a validly signed
    lease record of N for J (its pinned key, agent and holder) at a position < p whose
    server stamp is > stamp(p) - TTL.

A holder's write fence (`valid_until`, node/placement/leases.py) runs from the moment it sent
its last record that the stream acknowledged, so an honest home writes nothing once the log
could show it lapsed. Reading a verdict costs a request or two (`STREAM.MSG.GET` with
`start_time` and `next_by_subj`, which nats-server 2.15 answers; `up_to_seq` it ignores
there), each with a deadline.
"""

from __future__ import annotations

import asyncio
import base64
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from node.placement.records import KeyLookup, LeaseRecord, check_record
from node.sync.nats.subjects import lease_subject, parse_lease_subject, stream_name

GET_TIMEOUT_SECS = 2.0
MAX_SKIPPED = 8  # junk records of a holder stepped over before the verdict is "live"


@dataclass(frozen=True)
class Logged:
    """A message of the mesh's stream as MSG.GET answers it."""

    position: int
    stamp: float  # the server's stamp, seconds since the epoch (UTC)
    subject: str
    data: bytes


def stamp_of(text: str) -> float:
    """An RFC 3339 stamp with up to nanoseconds (`2026-12-02T10:11:47.989084382Z`) in seconds."""
    whole, dot, rest = text.partition(".")
    fraction, zone = rest, ""
    if dot:
        digits = len(rest) - len(rest.lstrip("0123456789"))
        fraction, zone = rest[:digits], rest[digits:]
    else:
        zone = whole[19:]
        whole = whole[:19]
    zone = "+00:00" if zone in ("Z", "") else zone
    seconds = datetime.fromisoformat(whole + zone).timestamp()
    return seconds + (float("0." + fraction) if fraction else 0.0)


def iso_of(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def msg_get(js: JetStreamContext, mesh: str, request: dict[str, Any]) -> Logged | None:
    """One STREAM.MSG.GET of the mesh's stream (None: no such message)."""
    api = f"{js._prefix}.STREAM.MSG.GET.{stream_name(mesh)}"
    try:
        answer = await asyncio.wait_for(
            js._api_request(api, msgspec.json.encode(request), timeout=GET_TIMEOUT_SECS),
            GET_TIMEOUT_SECS,
        )
    except NotFoundError:
        return None
    message = answer["message"]
    data = base64.b64decode(message.get("data") or "")
    return Logged(int(message["seq"]), stamp_of(message["time"]), message["subject"], data)


async def publish_record(
    js: JetStreamContext, mesh: str, agent: str, node: str, value: bytes, timeout: float
) -> int:
    """Put `node`'s signed record of `agent` in the stream; its position (the ack's seq)."""
    ack = await js.publish(
        lease_subject(mesh, node, agent), value, timeout=timeout, stream=stream_name(mesh)
    )
    return int(ack.seq)


def record_of(
    logged: Logged, mesh: str, agent: str, node: str, lookup: KeyLookup
) -> LeaseRecord | str:
    """The lease record of `node` for `agent` a stream message holds, or why it is none."""
    if parse_lease_subject(mesh, logged.subject) != (node, agent):
        return f"stream message {logged.position} is not {node!r}'s lease log of {agent}"
    return check_record(logged.data, agent, node, lookup)


async def record_at(js: JetStreamContext, mesh: str, position: int) -> Logged | None:
    return await msg_get(js, mesh, {"seq": position})


async def live_at(
    js: JetStreamContext,
    mesh: str,
    agent: str,
    node: str,
    at: Logged,
    ttl: float,
    lookup: KeyLookup,
) -> Logged | None:
    """The record that shows `node`'s lease of `agent` live at the position of `at` (the first
    one in the TTL before it), or None: lapsed there."""
    where = lease_subject(mesh, node, agent)
    since = at.stamp - ttl
    found = await msg_get(js, mesh, {"next_by_subj": where, "start_time": iso_of(since)})
    for _ in range(MAX_SKIPPED):
        if found is None or found.position >= at.position:
            return None
        if found.stamp > since and isinstance(
            record_of(found, mesh, agent, node, lookup), LeaseRecord
        ):
            return found
        found = await msg_get(js, mesh, {"seq": found.position + 1, "next_by_subj": where})
    return found  # a holder that fills its own log with junk: counted live (its own harm)


async def last_record(js: JetStreamContext, mesh: str, agent: str, node: str) -> Logged | None:
    """The last message on `node`'s lease log of `agent` (None: none)."""
    return await msg_get(js, mesh, {"last_by_subj": lease_subject(mesh, node, agent)})


async def first_after(js: JetStreamContext, mesh: str, where: str, position: int) -> Logged | None:
    """The first message on subject `where` after stream `position`."""
    return await msg_get(js, mesh, {"seq": position + 1, "next_by_subj": where})
