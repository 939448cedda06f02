"""What the NATS consumer hands the repair queue with a gap (nats/repair_queue.py)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import NamedTuple

import msgspec

from node.ops.files import write_atomically

log = logging.getLogger("agent-node.sync")

# the receive path's "peer" for stream messages: not a configured peer, so no acks are inferred
# from it (heads come from the bucket) and equivocation findings share one hourly budget
STREAM_PEER = "(nats stream)"
GAP = "gap"


class Hold(NamedTuple):
    """The first message of a journal the consumer acknowledged without applying it all."""

    subject: str
    stream_seq: int
    seq: int  # the seq of its first envelope refused as a gap


class SavedHold(msgspec.Struct, array_like=True):
    journal: str
    want: int
    subject: str
    stream_seq: int
    seq: int
    publisher: str | None


_saved_decoder = msgspec.json.Decoder(list[SavedHold])
HOLDS_FILE = "nats-holds.json"
MAX_HOLDS_BYTES = 16 << 20


class HoldFile:
    """The holds of the repair queue, on disk before the consumer acknowledges their batch:
    a node killed then restarted still knows which acknowledged messages it has not applied
    (written only when a gap comes or goes: rare)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> list[SavedHold]:
        try:
            with self.path.open("rb") as f:
                data = f.read(MAX_HOLDS_BYTES + 1)
        except FileNotFoundError:
            return []
        if len(data) > MAX_HOLDS_BYTES:
            log.warning("%s is over %d bytes; ignored", self.path, MAX_HOLDS_BYTES)
            return []
        try:
            return _saved_decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            log.warning("%s is unreadable (%s); ignored", self.path, exc)
            return []

    async def save(self, holds: list[SavedHold]) -> None:
        await asyncio.to_thread(write_atomically, self.path, msgspec.json.encode(holds))
