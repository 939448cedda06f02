"""Garbage-collector settings for a serving node.

CPython runs a young-generation collection every 700 net allocations of container objects; a
request allocates a few hundred that die by reference counting, so under load a collection ran
every few requests and scanned the requests in flight (2 to 3 µs of POST /api/v1/findings' CPU,
issue 26). Everything built at start-up (modules, the read models) lives as long as the process:
frozen, later full collections do not walk it again."""

from __future__ import annotations

import gc

# Net allocations between young collections: above what the requests in flight hold, so the
# collector runs for long-lived growth (the read models) and real cycles, not per request.
YOUNG_THRESHOLD = 10_000


def settle_after_start() -> None:
    """Call once the node serves: collect the start-up's garbage, freeze what is left, and
    raise the young-generation threshold."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
