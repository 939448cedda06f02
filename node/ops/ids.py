"""Ids the node makes for its own things (requests, runs, streamed messages): unique, cheap.

32 hex digits like a UUID's: a random prefix drawn once per process and a counter. `uuid4()`
read the kernel's random source on every call, and that system call let another thread take
the GIL mid-request or mid-tick: about 20 µs a POST under load (bench/RESULTS.md, "POST
findings, per request"), 4 % of an agent's tick. These ids name things; they guard nothing,
so they need not be unpredictable.
"""

from __future__ import annotations

import itertools
import os

_PREFIX = os.urandom(8).hex()
_counter = itertools.count(1)


def new_id() -> str:
    return f"{_PREFIX}{next(_counter):016x}"
