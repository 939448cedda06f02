"""Commit listeners and read models that raise: logged, counted, reported, and never fatal.

The journal and the read models isolate the fault (eventstore/delivery.py, projections/base.py);
this reporter is what an operator sees of it: the `svc_listener_faults_total{listener}` metric,
an error log line, and a `high` finding in this node's own journal, once per (listener,
envelope) and at most MAX_FINDINGS_PER_HOUR an hour, so an envelope that breaks a read model
on every rebuild, or a fault in the findings read model itself, cannot flood the journal.
Faults found while rebuilding at start-up are journaled once the store runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque

from eventstore.envelope import Envelope
from eventstore.store import CommitListener, StoreClosedError
from node.context import NodeContext
from node.sync.incidents import Incidents

log = logging.getLogger("agent-node.faults")
MAX_FINDINGS_PER_HOUR = 10
MAX_QUEUED = 100
MAX_TRACEBACKS = 20  # per process; after that one short line per fault


class FaultReporter:
    def __init__(self, ctx: NodeContext) -> None:
        self._ctx = ctx
        self._incidents = Incidents(ctx)
        self._queue: deque[tuple[str, str, str]] = deque(maxlen=MAX_QUEUED)
        self._journaled: deque[float] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.count = 0

    def attach(self) -> None:
        """Become the fault hook of the read models and of the journal's commit listeners."""
        self._ctx.projections.on_fault = self.read_model_failed
        self._ctx.store.on_listener_fault = self.listener_failed
        disk = self._ctx.projections.disk
        if disk is not None:  # its faults are found on the journal's writer thread
            loop = asyncio.get_running_loop()

            def from_the_writer(name: str, envelope: Envelope, exc: Exception) -> None:
                loop.call_soon_threadsafe(self.read_model_failed, name, envelope, exc)

            disk.on_fault = from_the_writer

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="fault-findings")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def read_model_failed(self, name: str, envelope: Envelope, exc: Exception) -> None:
        self._record(f"read model {name}", envelope, exc)

    def listener_failed(
        self, listener: CommitListener, envelopes: list[Envelope], exc: Exception
    ) -> None:
        name = getattr(listener, "__qualname__", type(listener).__name__)
        self._record(f"commit listener {name}", envelopes[0] if envelopes else None, exc)

    def _record(self, listener: str, envelope: Envelope | None, exc: Exception) -> None:
        self.count += 1
        self._ctx.metrics.listener_faults.labels(listener=listener).inc()
        where = f"{envelope.stream}#{envelope.seq}" if envelope else "?"
        kind = envelope.event.type[:80] if envelope else "?"
        text = f"{type(exc).__name__}: {str(exc)[:300]}"
        if self.count <= MAX_TRACEBACKS:
            log.error("%s raised on %s (%s); skipped it", listener, where, kind, exc_info=exc)
        else:
            log.error("%s raised on %s (%s); skipped it: %s", listener, where, kind, text)
        title = f"{listener} failed on {where}"
        detail = (
            f"{listener} raised {text} on the {kind} event at {where}. The event is stored; "
            "this read model or stream skipped it and goes on with the next ones."
        )
        self._queue.append((f"listener-fault/{listener}/{where}", title[:1000], detail))
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                key, title, detail = self._queue.popleft()
                if not self._within_budget():
                    log.warning(
                        "fault findings over %d/h; not journaled: %s", MAX_FINDINGS_PER_HOUR, title
                    )
                    continue
                try:
                    await self._incidents.report(key, "high", title, detail)
                except StoreClosedError:
                    return
                except Exception:  # reporting must never end the reporter
                    log.exception("could not journal a fault finding")

    def _within_budget(self) -> bool:
        now = time.monotonic()
        while self._journaled and now - self._journaled[0] > 3600:
            self._journaled.popleft()
        if len(self._journaled) >= MAX_FINDINGS_PER_HOUR:
            return False
        self._journaled.append(now)
        return True
