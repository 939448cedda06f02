"""The suite's one way to wait for a condition: poll it until it holds or time runs out.

`until` is for async tests (the event loop keeps running between polls, so the node under
test makes progress); `wait_until` for plain tests that drive node processes or threads. Both
return the predicate's first truthy value and fail the test, naming `what`, at the deadline.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any

import pytest


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
            pytest.fail(f"{what} not met within {timeout} s")
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
    while True:
        try:
            value = predicate()
        except retry_on:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not met within {timeout} s")
        time.sleep(interval)
