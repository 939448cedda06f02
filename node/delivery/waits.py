"""The outbox's loops wait for their next turn the same way: a wake-up, the node stopping, or
a timeout, whichever comes first."""

from __future__ import annotations

import asyncio


async def next_turn(stopping: asyncio.Event, timeout: float | None, *wakes: asyncio.Event) -> None:
    waiters = [asyncio.ensure_future(e.wait()) for e in (stopping, *wakes)]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
