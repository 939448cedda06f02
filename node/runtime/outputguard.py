"""Bounds the disk agents' stdout/stderr files hold while runs are still going.

The worker reads an agent's output only between runs; an agent printing in a loop for a
whole run (up to its wall-clock budget) would otherwise fill the disk first. This thread
trims every agent's files every `interval` seconds (see OutputCapture.trim).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from node.runtime.output import OutputCapture

log = logging.getLogger(__name__)
GUARD_INTERVAL = 0.05


class OutputGuard:
    def __init__(
        self, captures: Callable[[], Iterable[OutputCapture]], interval: float = GUARD_INTERVAL
    ) -> None:
        self._captures = captures
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="agent-output-guard", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            for capture in self._captures():
                try:
                    capture.trim()
                except Exception:  # never let one agent's files stop the guard
                    log.exception("cannot trim the output of agent %s", capture.name)
