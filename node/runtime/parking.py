"""Task runs parked while people decide: a run is cut where it would wait for them.

A task's run whose gated call is left to people (an approval no policy decided at once) does
not hold its agent's one instance for minutes: the host parks it (RunParked), which ends the
run at that call and frees the instance for the agent's other work. The approval's wait goes
on, on the event loop, as a future kept here; once it resolves (decided, expired, abandoned)
the task is released to the agent's queue and run again from the start. Its recorded calls
are replayed (node/runtime/callrecords.py), and at the parked call the verdict kept here is
taken instead of asking again: what was approved is performed, once.

Bounded: at most `limit` runs of one agent are parked (past it a run waits in place, as
without parking); each holds its request text (at most 64 KiB) and one future. Nothing here
survives the process: after a restart the resumed run asks again, and the gate adopts the
request still pending in the journal (node/services/approvals.py).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from node.runtime.hostapi import RunParked
from projections.approvals import Verdict

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Parked:
    """One parked run: its task, the call that asked (run#position) and the request's hash."""

    task: str
    call: str
    request_hash: str
    verdict: concurrent.futures.Future[Verdict]


class ParkedRuns:
    """The parked runs of one agent; used from its worker thread and the event loop."""

    def __init__(self, limit: int, released: Callable[[str], bool]) -> None:
        self.limit = limit
        # told (on the loop) the task whose verdict arrived; False when it is not open any
        # more (canceled meanwhile: the gate denied its request itself)
        self._released = released
        self._lock = threading.Lock()
        self._runs: dict[str, Parked] = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._runs)

    def has_room(self) -> bool:
        with self._lock:
            return len(self._runs) < self.limit

    def park(self, parked: Parked) -> None:
        with self._lock:
            previous = self._runs.get(parked.task)
            self._runs[parked.task] = parked
        if previous is not None:
            previous.verdict.cancel()
        parked.verdict.add_done_callback(lambda _: self._decided(parked))

    def _decided(self, parked: Parked) -> None:
        with self._lock:
            current = self._runs.get(parked.task) is parked
        if not current or parked.verdict.cancelled():
            return
        try:
            resumes = self._released(parked.task)
        except Exception:  # the agent is gone meanwhile: nothing to resume
            log.exception("cannot release parked task %s", parked.task)
            resumes = False
        if not resumes:  # no run will take it: it must not hold a place
            with self._lock:
                if self._runs.get(parked.task) is parked:
                    del self._runs[parked.task]

    def take(self, task: str, call: str, request_hash: str) -> Parked | None:
        """The parked run of `task` when it was parked at this call with this request (its
        verdict's future, done or not); None when it was not. A run parked elsewhere is
        dropped: the resumed run asks for something else now."""
        with self._lock:
            parked = self._runs.pop(task, None)
        if parked is None:
            return None
        if (parked.call, parked.request_hash) == (call, request_hash):
            return parked
        parked.verdict.cancel()
        return None

    def cancel_all(self) -> list[str]:
        """The agent's instance ends: stop every wait (their requests stay pending in the
        journal, for the next instance or the lifecycle's hook); the tasks they were for."""
        with self._lock:
            runs, self._runs = list(self._runs.values()), {}
        for parked in runs:
            parked.verdict.cancel()
        return [p.task for p in runs]

    def tasks(self) -> list[str]:
        with self._lock:
            return list(self._runs)

    def verdict(
        self,
        ask: Callable[[Callable[[], None] | None], concurrent.futures.Future[Verdict]],
        task: str | None,
        call: str | None,
        request_hash: str,
        stopping: threading.Event,
    ) -> concurrent.futures.Future[Verdict]:
        """The verdict on a request, to wait for; RunParked when the run is parked instead.
        `ask(waiting)` sends the request to the gate (`waiting`, when given, is called as the
        request goes to people). Only a task's recorded call parks, while there is room; the
        resumed run gets the verdict its park waited for instead of asking again."""
        parkable = False
        if call is not None and task is not None:
            parked = self.take(task, call, request_hash)
            if parked is not None:
                return parked.verdict
            parkable = self.has_room()
        people = threading.Event()
        future = ask(people.set if parkable else None)
        if parkable and waits_for_people(future, people, stopping):
            assert call is not None and task is not None
            self.park(Parked(task, call, request_hash, future))
            raise RunParked(f"task {task} waits for people to decide")
        return future


PEOPLE_POLL_SECS = 0.05


def waits_for_people(
    future: concurrent.futures.Future[Verdict], people: threading.Event, stopping: threading.Event
) -> bool:
    """Whether the request went to people (the gate set `people`) before it was decided:
    False as soon as the future is done (a policy's permit or forbid, a decision already
    recorded, an error) or the agent is being stopped (the caller's wait gives up then)."""
    while not future.done() and not stopping.is_set():
        if people.wait(PEOPLE_POLL_SECS):
            return not future.done()
    return False
