"""Host calls that happen once: each is journaled with its result, and a resumed run replays it.

One `CallRecorder` per hosted agent, used by its JournalHost on the agent's worker thread. A
host call with an effect or a cost goes through `call`: the recorder numbers it within the run
(its position), and

- when the run resumes an interrupted one (projections/call_records.py finds it by kind and
  subject: the task, the tool, the tick) and the journal holds a record at that position for
  the same call with the same request hash, the recorded result is returned, and nothing is
  performed, asked, charged or billed again;
- else the call is performed live (`perform`), given a `CallContext`: the Idempotency-Key of
  the call (the same on every node and retry: agent, run, position and request hash) and
  whether an approval given before the interruption already covers it; its outcome is
  journaled (with the events `perform` adds, in one write) before the result reaches the agent.

A record is one write (with its run's `run.opened` when it is the run's first, unless the
call read its key or ref first: then the run was made durable before the call left the node);
a tick's or tool call's run ends with `run.closed`, a task's with its task's end (no write).

A replayed run that asks at a recorded position for something else (its code is not
deterministic) gets live calls from there on, and a finding says so. State reads are not
recorded: a resumed run reads the state as the journal has it now (docs/agents.md).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from eventstore.store import EventStore, NewEvent
from node.ops import tracing
from node.runtime.hostapi import HostError, Run
from projections import catalogue as c
from projections.approvals import hash_request
from projections.call_records import CallRecords, OpenRun, call_ref
from projections.catalogue import MAX_RECORD_RESULT, CallName, CallRecorded, RunClosed, RunOpened

log = logging.getLogger(__name__)
RECORDED_KINDS = frozenset({"tick", "task", "tool"})
IDEMPOTENCY_HEADER = "Idempotency-Key"


def idempotency_key(agent: str, run: str, position: int, request_hash: str) -> str:
    """The key of one call: derived only from what every node resuming the run knows."""
    digest = hashlib.sha256(f"{agent}\n{run}\n{position}\n{request_hash}".encode()).hexdigest()
    return digest[:40]


def header_value(key: str) -> str:
    """The header's value as the IETF draft writes it: a Structured Fields string."""
    return f'"{key}"'


class CallContext:
    """What a live call needs of the recorder: its key, whether it is approved already, the
    events to journal with its record (an `action.performed`, say), and what to do once that
    write is durable and folded (or the call ended without one): `after_write`.

    Reading `key` or `ref` makes the run durable first (its `run.opened`, when the run has
    none yet): the key leaves the node with the call and the ref names it in an approval, so
    the next instance must resume the run under the same id. A call that reads neither (an
    infer that asks no one, a GET) has its run opened in the write of its record."""

    def __init__(
        self,
        key: str | None,
        ref: str | None,
        approved: bool = False,
        durable: Callable[[], None] | None = None,
    ) -> None:
        self._key, self._ref, self.approved = key, ref, approved
        self._durable = durable
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.written: list[Callable[[], None]] = []

    @property
    def key(self) -> str | None:
        self._make_durable()
        return self._key

    @property
    def ref(self) -> str | None:
        self._make_durable()
        return self._ref

    def _make_durable(self) -> None:
        durable, self._durable = self._durable, None
        if durable is not None:
            durable()

    def journal_with(self, type_: str, data: dict[str, Any]) -> None:
        self.events.append((type_, data))

    def after_write(self, then: Callable[[], None]) -> None:
        """Run `then` after the record and its events are journaled and folded (an inference
        budget's reservation ends once its charge is in the ledger); run all the same when
        the call ends without a record (a stop cut it, the write failed)."""
        self.written.append(then)

    def _written(self) -> None:
        for then in self.written:
            then()


@dataclass
class _Current:
    run: Run
    journal_id: str  # the run's id in the journal: this run's, or the interrupted one's
    opened: bool
    resumed: OpenRun | None
    position: int = 0
    cut: bool = False  # a call of it was refused because the agent is being stopped


class OpenRunsView(Protocol):
    """Where the recorder finds an interrupted run (projections/call_records.py `OpenRuns`)."""

    def resumable(self, agent: str, kind: str, subject: str) -> OpenRun | None: ...


class JournalFold:
    """`OpenRunsView` by folding the agent's journal at each look-up: for a recorder without
    the node's read model (a bench, a test of the recorder alone)."""

    def __init__(self, store: EventStore) -> None:
        self.store = store

    def resumable(self, agent: str, kind: str, subject: str) -> OpenRun | None:
        records = CallRecords()
        for envelope in self.store.iter_stream(agent):
            records.apply(c.payload_of(envelope))
        return records.resumable(kind, subject)


class CallRecorder:
    def __init__(
        self,
        agent: str,
        store: EventStore,
        stopping: threading.Event,
        redact: Callable[[Any], Any],
        max_result_bytes: int,
        open_runs: OpenRunsView | None = None,
    ) -> None:
        self.agent = agent
        self.store = store
        self.stopping = stopping
        self.redact = redact
        self.max_result_bytes = min(max_result_bytes, MAX_RECORD_RESULT)
        self.open_runs = open_runs if open_runs is not None else JournalFold(store)
        self._current: _Current | None = None

    # ---- the run's frame -------------------------------------------------------------------

    def reset(self) -> None:
        """A new instance: nothing to forget, since the interrupted runs are read from the
        journal's read model at each run's start (kept for the hooks that call it)."""

    def run_started(self, run: Run) -> None:
        self._current = None
        if run.kind not in RECORDED_KINDS:
            return
        resumed = self.open_runs.resumable(self.agent, run.kind, run.detail)
        if resumed is not None:
            log.info(
                "agent %s: %s %s resumes run %s", self.agent, run.kind, run.detail, resumed.run
            )
            self._current = _Current(run, resumed.run, True, resumed)
        else:
            self._current = _Current(run, run.run_id, False, None)

    def run_finished(self, run: Run, faulted: bool = False) -> None:
        """The run returned or faulted: close it, unless the stop of the agent cut it (a call
        refused, a fault, or a task, which a stop hands over to the next instance: then the
        next instance resumes it). A task's run is closed by its task's end (or its await)
        in the journal: no write of its own."""
        current, self._current = self._current, None
        if current is None or not current.opened or run.kind == "task":
            return
        if self.stopping.is_set() and (current.cut or faulted):
            return
        self.store.append_blocking(self.agent, *c.event_of(RunClosed(run=current.journal_id)))

    def run_parked(self) -> None:
        """The run was parked at a call waiting for people (node/runtime/parking.py): it is
        left open, and the task's next run resumes it."""
        self._current = None

    @property
    def resuming(self) -> bool:
        """Whether the current run still replays recorded calls."""
        return self._current is not None and self._current.resumed is not None

    # ---- one call --------------------------------------------------------------------------

    def call(
        self, call: CallName, target: str, request: str, perform: Callable[[CallContext], str]
    ) -> str:
        """The result of the call: recorded when the run resumes one that made it, else live.
        `request` is the call's request as journaled (secrets masked)."""
        current = self._current
        if current is None:  # no run to record it in (list-tools): nothing to resume
            return self._unrecorded(perform)
        position = current.position
        current.position += 1
        request_hash = hash_request(request)
        if current.resumed is not None:
            record = current.resumed.records.get(position)
            if record is None:  # the first call the interrupted run had not completed
                approved = current.resumed.approved.get(position) == request_hash
                current.resumed = None
                return self._live(current, position, call, target, request_hash, perform, approved)
            if (record.call, record.target, record.request_hash) == (call, target, request_hash):
                tracing.annotate({"agent.call.position": position, "agent.call.replayed": True})
                return self._replayed(record)
            self._diverged(current, position, record, call, target)
        return self._live(current, position, call, target, request_hash, perform, False)

    def _unrecorded(self, perform: Callable[[CallContext], str]) -> str:
        """A live call outside a recorded run: its events are journaled without a record."""
        context = CallContext(None, None)
        try:
            try:
                return perform(context)
            finally:
                if context.events:
                    self.store.append_many_blocking(
                        [NewEvent(self.agent, t, self.redact(d)) for t, d in context.events]
                    )
        finally:
            context._written()

    def _replayed(self, record: CallRecorded) -> str:
        if record.omitted is not None:
            raise HostError(
                "failed",
                f"this {record.call} was performed before the run was interrupted; its result "
                f"({record.omitted} bytes) was over node.call_record_max_kb and is not kept",
            )
        if record.outcome == "error":
            kind = record.error_kind
            known = (
                kind
                if kind in ("not-permitted", "approval-denied", "approval-timeout")
                else "failed"
            )
            raise HostError(known, record.result)  # type: ignore[arg-type]
        return record.result

    def _diverged(
        self, current: _Current, position: int, record: CallRecorded, call: str, target: str
    ) -> None:
        current.resumed = None
        asked = f"{call} {target}".strip()
        held = f"{record.call} {record.target}".strip()
        detail = (
            f"the resumed {current.run.kind} run {current.journal_id} asked at call {position} "
            f"for {asked} with another request than the journal records ({held}, "
            f"{record.request_hash}): its code is not deterministic between host calls. "
            "From this call on its calls are performed live."
        )
        finding = c.Finding(
            severity="medium",
            title="a resumed run diverged from its journal",
            detail=detail[: c.MAX_TEXT],
        )
        self.store.append_blocking(self.agent, *c.event_of(finding))

    def _live(
        self,
        current: _Current,
        position: int,
        call: CallName,
        target: str,
        request_hash: str,
        perform: Callable[[CallContext], str],
        approved: bool,
    ) -> str:
        run_id = current.journal_id
        context = CallContext(
            idempotency_key(self.agent, run_id, position, request_hash),
            call_ref(run_id, position),
            approved,
            durable=None if current.opened else lambda: self._open(current),
        )
        try:
            try:
                result = perform(context)
            except HostError as e:
                if self.stopping.is_set():  # a stop cuts the call: the resumed run makes it
                    current.cut = True
                else:
                    text, omitted = self._bounded(e.message)
                    failed = CallRecorded(
                        run=run_id,
                        position=position,
                        call=call,
                        target=target[:1000],
                        request_hash=request_hash,
                        outcome="error",
                        error_kind=e.kind,
                        result=text,
                        omitted=omitted,
                    )
                    self._record(current, failed, context)
                raise
            text, omitted = self._bounded(result)
            done = CallRecorded(
                run=run_id,
                position=position,
                call=call,
                target=target[:1000],
                request_hash=request_hash,
                result=text,
                omitted=omitted,
            )
            self._record(current, done, context)
            return result
        finally:
            context._written()  # the record (and its events) are folded, or there is none

    def _bounded(self, text: str) -> tuple[str, int | None]:
        """The result as journaled (secrets masked), or "" and its size when over the bound."""
        redacted = str(self.redact(text))
        size = len(redacted.encode("utf-8", "surrogatepass"))
        return ("", size) if size > self.max_result_bytes else (redacted, None)

    def _open(self, current: _Current) -> None:
        """Journal the run's `run.opened` now: a call of it needs the run durable first."""
        if not current.opened:
            self.store.append_blocking(self.agent, *c.event_of(self._opened(current)))
            current.opened = True

    @staticmethod
    def _opened(current: _Current) -> RunOpened:
        return RunOpened(run=current.journal_id, kind=current.run.kind, subject=current.run.detail)

    def _record(self, current: _Current, record: CallRecorded, context: CallContext) -> None:
        """One write: the run's `run.opened` if it has none yet, the call's events, its
        record."""
        events = (
            [] if current.opened else [NewEvent(self.agent, *c.event_of(self._opened(current)))]
        )
        events += [NewEvent(self.agent, t, self.redact(d)) for t, d in context.events]
        events.append(NewEvent(self.agent, *c.event_of(record)))
        self.store.append_many_blocking(events)
        current.opened = True
