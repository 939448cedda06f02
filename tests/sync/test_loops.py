"""The NATS link's loops stop together even when one loses its cancellation (node/sync/loops.py).

On Python 3.11 a cancellation can be lost (asyncio.wait_for returning what completed in the
same turn, nats-py's flush catching CancelledError); under a TaskGroup the loop then runs on and
the group waits for it forever: a node's NATS link hung silently after a server was killed
(tests/sync/test_nats_mesh.py's ten-node test: 2 of 17 loaded runs failed so)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import pytest

from node.sync.loops import LoopEnded, run_together


class Loops:
    """A loop that loses its first cancellation (as nats-py's flush does: `except
    CancelledError: pass`) and then goes on, and a loop that fails."""

    def __init__(self) -> None:
        self.turns_after_cancel = 0
        self.stopped = asyncio.Event()
        self.quit = False  # the only way to end it once its cancellation is lost

    async def losing(self) -> None:
        try:
            lost = False
            while not self.quit:
                try:
                    await asyncio.sleep(0.01)
                except asyncio.CancelledError:
                    if lost:
                        raise
                    lost = True
                if asyncio.current_task().cancelling():  # type: ignore[union-attr]
                    self.turns_after_cancel += 1
        finally:
            self.stopped.set()

    async def failing(self) -> None:
        await asyncio.sleep(0.05)
        raise ConnectionError("the server went away")


async def test_a_task_group_waits_forever_for_a_loop_that_lost_its_cancellation() -> None:
    """Why run_together exists: the same loops under a TaskGroup never end."""
    loops = Loops()

    async def grouped() -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(loops.losing())
            group.create_task(loops.failing())

    task = asyncio.create_task(grouped())
    done, _ = await asyncio.wait([task], timeout=1.0)
    assert not done and loops.turns_after_cancel > 10  # the failure is still not raised
    loops.quit = True  # the group does not cancel its tasks again: end the loop by hand
    with pytest.raises(ExceptionGroup):
        await asyncio.wait_for(task, 1.0)


async def test_loops_stop_together_even_when_one_loses_its_cancellation() -> None:
    loops = Loops()
    started = time.monotonic()
    with pytest.raises(ExceptionGroup) as raised:
        await run_together({"losing": loops.losing(), "failing": loops.failing()}, grace=5.0)
    assert time.monotonic() - started < 2.0
    assert [repr(e) for e in raised.value.exceptions] == ["ConnectionError('the server went away')"]
    assert loops.stopped.is_set()  # cancelled again, it ended
    assert loops.turns_after_cancel >= 1  # it did lose the first cancellation


async def test_a_loop_that_never_stops_is_logged_and_left_behind(caplog) -> None:
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0.01)

    started = time.monotonic()
    with caplog.at_level(logging.ERROR, "agent-node.sync"), pytest.raises(ExceptionGroup):
        await run_together({"stubborn": stubborn(), "failing": Loops().failing()}, grace=0.5)
    assert 0.5 <= time.monotonic() - started < 2.0  # the failure is raised all the same
    assert "stubborn did not stop within 0.5 s of being cancelled; left behind" in caplog.text
    release.set()


async def test_a_loop_that_returns_ends_the_others_and_says_so() -> None:
    loops = Loops()

    async def returning() -> None:
        await asyncio.sleep(0.05)

    with pytest.raises(ExceptionGroup) as raised:
        await run_together({"losing": loops.losing(), "returning": returning()}, grace=5.0)
    [ended] = raised.value.exceptions
    assert isinstance(ended, LoopEnded) and str(ended) == "returning ended"
    assert loops.stopped.is_set()


async def test_cancelled_from_outside_it_stops_its_loops_and_is_cancelled() -> None:
    loops = Loops()
    task = asyncio.create_task(
        run_together({"losing": loops.losing(), "idle": asyncio.sleep(3600)}, grace=5.0)
    )
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 2.0)
    assert loops.stopped.is_set()
