"""The project's one way to wait for a condition: poll it until it holds or a deadline passes.

Hand-written sleep-and-poll loops kept drifting: some had no deadline at all (a test that hung
until the suite's timeout, with no word on what it waited for), others gave up silently and let a
later assertion fail far from the cause. `until` (async: the event loop keeps running between
polls) and `wait_until` (blocking: node processes, threads) return the predicate's first truthy
value, or raise `DeadlineExceeded` naming what was awaited and for how long.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any


class DeadlineExceeded(TimeoutError):
    """A condition did not hold in time; the message names it and the time allowed."""

    def __init__(self, what: str, timeout: float, last_error: BaseException | None = None) -> None:
        detail = f" (last error: {last_error!r})" if last_error is not None else ""
        super().__init__(f"{what} not met within {timeout:g} s{detail}")
        self.what = what
        self.timeout = timeout


async def until(
    predicate: Callable[[], Any],
    timeout: float = 30.0,
    what: str = "condition",
    interval: float = 0.02,
) -> Any:
    """`predicate` may be a plain function or return an awaitable (an HTTP read, say)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() > deadline:
            raise DeadlineExceeded(what, timeout)
        await asyncio.sleep(interval)


def wait_until(
    predicate: Callable[[], Any],
    timeout: float = 30.0,
    what: str = "condition",
    interval: float = 0.05,
    retry_on: tuple[type[BaseException], ...] = (),
) -> Any:
    """Blocking; an exception of `retry_on` (a node still starting, say) counts as not yet."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = predicate()
        except retry_on as e:
            value, last_error = None, e
        if value:
            return value
        if time.monotonic() > deadline:
            raise DeadlineExceeded(what, timeout, last_error)
        time.sleep(interval)
