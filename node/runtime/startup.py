"""Start-up progress of the agents, in the node's log (issue 37 item 6).

The node answers (the ready line) before its agents run: each compiles its component on a first
start, seconds to minutes. So the operator sees a line per agent as it comes up ("agent payer
running, 3 of 5"), and a line after the ready line naming those still starting.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Mapping
from concurrent.futures import Future

from node.display.humanize import duration
from node.runtime.worker import AgentWorker

log = logging.getLogger("agent-node")


class StartupProgress:
    """Counts the agents started at boot as each one's first instance runs or fails."""

    def __init__(self, workers: Mapping[str, AgentWorker]) -> None:
        self._workers = dict(workers)
        self._pending = set(self._workers)
        self._done = 0
        self._lock = threading.Lock()

    def watch(self) -> None:
        for name, worker in self._workers.items():
            worker.probation.add_done_callback(functools.partial(self._settled, name))

    def pending(self) -> list[str]:
        with self._lock:
            return sorted(self._pending)

    def _settled(self, name: str, outcome: Future[str | None]) -> None:
        with self._lock:
            if name not in self._pending:
                return
            self._pending.discard(name)
            self._done += 1
            done, total = self._done, len(self._workers)
        worker = self._workers[name]
        error = outcome.result() if not outcome.cancelled() else "cancelled"
        if error is None:
            log.info("agent %s running, %d of %d%s", name, done, total, _loaded(worker))
        else:
            log.warning("agent %s did not start, %d of %d: %s", name, done, total, error)

    def log_after_ready(self) -> None:
        """The line after `ready`: which agents are still starting, if any."""
        pending = self.pending()
        if pending:
            log.info(
                "agents still starting (a first start compiles each component; a line follows "
                "for each): %s",
                ", ".join(pending),
            )


def _loaded(worker: AgentWorker) -> str:
    if worker.load_seconds is None:
        return ""
    if worker.load_cache_hit:
        return " (compiled component from the cache)"
    return f" (compiled in {duration(worker.load_seconds)})"
