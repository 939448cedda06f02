"""What the NATS consumer hands the repair queue with a gap (nats_repair_queue.py)."""

from __future__ import annotations

from typing import NamedTuple

# the receive path's "peer" for stream messages: not a configured peer, so no acks are inferred
# from it (heads come from the bucket) and equivocation findings share one hourly budget
STREAM_PEER = "(nats stream)"
GAP = "gap"


class Hold(NamedTuple):
    """The first message of a journal the consumer acknowledged without applying it all."""

    subject: str
    stream_seq: int
    seq: int  # the seq of its first envelope refused as a gap
