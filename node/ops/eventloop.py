"""Which asyncio event loop serves the node.

uvloop (libuv, in C) where it is installed: its sockets, timers and cross-thread wake-ups cost
about 6 µs less CPU per POST /api/v1/findings than asyncio's own loop (issue 26,
bench/RESULTS.md). `[node] event_loop = "asyncio"` keeps the standard loop (a platform without
uvloop, or to rule the loop out while debugging); "uvloop" insists on it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Literal

from node.config.model import ConfigError

EventLoopChoice = Literal["auto", "uvloop", "asyncio"]
LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def loop_factory(choice: EventLoopChoice) -> LoopFactory | None:
    """The factory for `asyncio.Runner`; None for asyncio's default loop."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise ConfigError(
                '[node] event_loop = "uvloop", but uvloop is not installed: '
                'pip install uvloop, or set event_loop = "auto"'
            ) from None
        return None
    factory: LoopFactory = uvloop.new_event_loop
    return factory


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
