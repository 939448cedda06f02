"""Loops that run together and stop together, for sure.

`asyncio.TaskGroup` cancels each task once when one fails, then waits for them without bound.
On Python 3.11 one cancellation can be lost: `asyncio.wait_for` returns the result when what it
awaits completes in the same turn as the cancellation (bpo-42130), and nats-py's flush catches
CancelledError. A loop that lost its cancellation runs on, and the group waits for it forever
without a word. That was the NATS link of a node after a server was killed: the failure that
ended its connection was never logged, its heads loops and its watchdog were gone while its
publisher went on, and its heads stopped in both directions (docs/mesh.md).

So `run_together` cancels the tasks again until they have ended, for at most `grace` seconds;
a task still running then is logged by name and left behind (its connection is closed next,
so its calls fail), and the failure that ended the loops is raised either way.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine, Iterable
from typing import Any, NoReturn

log = logging.getLogger("agent-node.sync")
# how often a task that has not ended is cancelled again
RECANCEL_SECS = 0.2
# tasks that would not stop (held here: the loop keeps only weak references to tasks)
_left_behind: set[asyncio.Task[Any]] = set()


class LoopEnded(ConnectionError):
    """A loop that runs until cancelled returned."""


async def run_together(loops: dict[str, Coroutine[Any, Any, Any]], *, grace: float) -> NoReturn:
    """Run the loops (name → coroutine) until one ends; stop the others (cancelled again and
    again, `grace` seconds at most); raise what ended them (an ExceptionGroup of every
    failure, LoopEnded for a loop that returned). Cancelled itself, it stops them the same way
    and lets the cancellation through."""
    tasks = [asyncio.create_task(coro, name=name) for name, coro in loops.items()]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stuck = await stop(tasks, grace)
        if stuck:
            log.error(
                "%s did not stop within %g s of being cancelled; left behind",
                ", ".join(stuck),
                grace,
            )
    first = sorted(done, key=tasks.index)
    failures: list[Exception] = []
    for task in first + [t for t in tasks if t not in done]:
        if not task.done() or task.cancelled():
            continue
        error = task.exception()
        if isinstance(error, Exception):
            failures.append(error)
        elif error is not None:
            raise error  # KeyboardInterrupt, SystemExit: not a loop's failure
        elif task in done:
            failures.append(LoopEnded(f"{task.get_name()} ended"))
    if not failures:
        failures.append(LoopEnded(f"{first[0].get_name()} was cancelled"))
    raise ExceptionGroup("loops ended", failures)


async def stop(tasks: Iterable[asyncio.Task[Any]], grace: float) -> list[str]:
    """Cancel the tasks until they have ended (again every RECANCEL_SECS: a cancellation can be
    lost), for at most `grace` seconds; the names of those still running, left behind."""
    pending = {task for task in tasks if not task.done()}
    deadline = time.monotonic() + grace
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=min(RECANCEL_SECS, left))
    for task in pending:
        _left_behind.add(task)
        task.add_done_callback(_forget)
    return sorted(task.get_name() for task in pending)


def _forget(task: asyncio.Task[Any]) -> None:
    _left_behind.discard(task)
    if not task.cancelled():
        task.exception()  # read: never "exception was never retrieved"
