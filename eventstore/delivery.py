"""After a commit: the new envelopes go to the commit listeners on the event loop, in position
order, and only then are the callers released, so a caller that got its envelope back knows
every read model has folded it. A listener that raises is reported, never fatal to the rest.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from eventstore.envelope import Envelope

CommitListener = Callable[[list[Envelope]], None]
# Told on the loop when a journal was rewound: (the journal, the envelopes removed).
RewindListener = Callable[[str, list[Envelope]], None]
# Told when a commit listener raised: (the listener, the envelopes it was given, the exception).
ListenerFaultHook = Callable[[CommitListener, list[Envelope], Exception], None]
_log = logging.getLogger("agent-node.eventstore")


class Waiting(Protocol):
    """A caller waiting for its commit (writer.Request)."""

    def finish(self) -> None: ...


def log_listener_fault(listener: CommitListener, envelopes: list[Envelope], exc: Exception) -> None:
    name = getattr(listener, "__qualname__", repr(listener))
    first = envelopes[0] if envelopes else None
    where = f"{first.stream}#{first.seq}" if first else "?"
    _log.error("commit listener %s raised on a batch from %s", name, where, exc_info=exc)


class Delivery:
    """The listeners, the position they have seen, and who waits for the next one."""

    def __init__(self, last_delivered: int) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None  # bound when the store starts
        self.listeners: list[CommitListener] = []
        self.rewind_listeners: list[RewindListener] = []
        self.on_listener_fault: ListenerFaultHook = log_listener_fault
        self.last_delivered = last_delivered
        self._waiters: list[asyncio.Future[None]] = []

    def deliver(self, batch: Sequence[Waiting], envelopes: list[Envelope]) -> None:
        """From the writer thread: run the listeners on the loop, then release the batch's
        callers (on this thread when there is no running loop to hand over to)."""

        def run() -> None:
            try:
                if envelopes:
                    for listener in self.listeners:
                        try:
                            listener(envelopes)
                        except Exception as exc:
                            self._listener_fault(listener, envelopes, exc)
                    self.last_delivered = envelopes[-1].position
                    waiters, self._waiters = self._waiters, []
                    for waiter in waiters:
                        if not waiter.done():
                            waiter.set_result(None)
            finally:  # whatever a listener did, no caller is left waiting
                for request in batch:
                    request.finish()

        self._on_loop(run)

    def deliver_rewind(self, request: Waiting, stream: str, removed: list[Envelope]) -> None:
        """From the writer thread: tell the rewind listeners on the loop, in order with the
        commits (one committed after the rewind reaches the listeners after it), then
        release the caller."""

        def run() -> None:
            try:
                if removed:
                    for listener in self.rewind_listeners:
                        try:
                            listener(stream, removed)
                        except Exception as exc:
                            _log.error("rewind listener %r raised", listener, exc_info=exc)
            finally:
                request.finish()

        self._on_loop(run)

    def _on_loop(self, run: Callable[[], None]) -> None:
        """Run `run` on the loop, in order with what was sent before; here when the loop is
        gone (closing)."""
        loop = self.loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(run)
                return
            except RuntimeError:
                pass
        run()

    def _listener_fault(
        self, listener: CommitListener, envelopes: list[Envelope], exc: Exception
    ) -> None:
        try:
            self.on_listener_fault(listener, envelopes, exc)
        except Exception:  # the reporter itself failed: the log line is all that is left
            log_listener_fault(listener, envelopes, exc)

    async def wait_beyond(self, position: int) -> None:
        """Return once an envelope after `position` has been committed and delivered."""
        while self.last_delivered <= position:
            future = asyncio.get_running_loop().create_future()
            self._waiters.append(future)
            await future
