"""The `infer` host call, on the agent's worker thread: checked and gated like a capability,
streamed to the agent's event streams (SSE `token`, AG-UI text and tool-call events), and
metered in the agent's journal (`inference.completed`, or `inference.failed`).

`node/runtime/host.py` hands each call here with itself as the `InferHost`, so that what wraps
its host calls (journaled call records) wraps this too.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

from node.config.model import AgentConfig
from node.inference import budgets, genai
from node.inference.ratelimit import LimitRefusal
from node.inference.service import CAPABILITY, Call, InferenceService, Outcome
from node.ops import tracing
from node.ops.ids import new_id
from node.runtime.callrecords import CallContext
from node.runtime.hostapi import HostError, run_clock
from projections import catalogue as c

T = TypeVar("T")
SLACK_SECS = 1.0  # past the run's deadline, the worker stops waiting for the loop
MAX_HELD = 16 * 1024  # characters held back at most: more goes out at once


class InferHost(Protocol):
    agent: AgentConfig
    name: str

    def _append(self, type_: str, data: dict[str, Any], stream: str | None = None) -> None: ...

    def _publish(self, event: str, data: dict[str, Any]) -> None: ...

    def _on_loop(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T: ...

    def _await_approval(self, capability: str, request: str, call: str | None = None) -> None: ...

    def run_id(self) -> str: ...

    def report_finding(self, severity: str, title: str, detail: str) -> None: ...


class StreamDeltas:
    """An answer's pieces as the agent's stream events, as they arrive (on the event loop).

    Pieces that arrive within `window_secs` of the last event sent are joined into one event
    (one `token` and one TEXT_MESSAGE_CONTENT, or one TOOL_CALL_ARGS), sent when the window
    ends: a model's pace of one token a millisecond would otherwise make two events, two
    redactions and an SSE frame per client each millisecond. The first piece, and the first
    after a pause, goes out at once; a piece of another kind (a tool call's start, another
    call's arguments) sends what is held first, so the order is the provider's. A client sees
    every piece's text, in order, never more than `window_secs` late. `close` sends what is
    held and ends the message and its tool calls."""

    def __init__(self, host: InferHost, run_id: str, window_secs: float = 0.0) -> None:
        self.host = host
        self.window = window_secs
        self.message_id = new_id()
        self.frame = {"run_id": run_id, "threadId": host.name, "runId": run_id}
        self.calls: list[str] = []
        self._held: list[str] = []  # pieces not sent yet, all of one kind
        self._held_size = 0
        self._held_call: str | None = None  # None: text; else the call whose arguments they are
        self._sent_at = -math.inf  # monotonic
        self._timer: asyncio.TimerHandle | None = None

    def begin(self) -> None:
        frame = {**self.frame, "messageId": self.message_id}
        self.host._publish("TEXT_MESSAGE_START", {**frame, "role": "assistant"})

    def text(self, token: str) -> None:
        self._piece(None, token)

    def tool_call(self, call_id: str, name: str) -> None:
        self.flush()
        self.calls.append(call_id)
        self.host._publish(
            "TOOL_CALL_START",
            {
                **self.frame,
                "tool_call_id": call_id,
                "toolCallId": call_id,
                "tool": name,
                "toolCallName": name,
                "parentMessageId": self.message_id,
            },
        )

    def tool_arguments(self, call_id: str, delta: str) -> None:
        self._piece(call_id, delta)

    def close(self) -> None:
        self.flush()
        self.host._publish("TEXT_MESSAGE_END", {**self.frame, "messageId": self.message_id})
        for call_id in self.calls:
            ids = {"tool_call_id": call_id, "toolCallId": call_id}
            self.host._publish("TOOL_CALL_END", {**self.frame, **ids})

    def _piece(self, call: str | None, piece: str) -> None:
        if not piece:
            return
        if self._held and call != self._held_call:
            self.flush()
        now = time.monotonic()
        self._held.append(piece)
        self._held_size += len(piece)
        self._held_call = call
        due = self._sent_at + self.window
        if now >= due or self._held_size >= MAX_HELD:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(due - now, self.flush)

    def flush(self) -> None:
        """Send what is held, as one event of its kind."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._held:
            return
        joined = "".join(self._held)
        call = self._held_call
        self._held, self._held_size = [], 0
        self._sent_at = time.monotonic()
        if call is None:
            self.host._publish("token", {"text": joined})
            frame = {**self.frame, "messageId": self.message_id}
            self.host._publish("TEXT_MESSAGE_CONTENT", {**frame, "text": joined, "delta": joined})
        else:
            ids = {"tool_call_id": call, "toolCallId": call}
            self.host._publish("TOOL_CALL_ARGS", {**self.frame, **ids, "delta": joined})


Journal = Callable[[str, dict[str, Any]], None]


def infer(
    host: InferHost, service: InferenceService, request: str, record: CallContext | None = None
) -> str:
    """One live inference. `record` is the call's record (node/runtime/callrecords.py): the
    metering is journaled in the same write as the record (a resumed run gets the answer from
    it, metered and billed once), and an approval given before the run was interrupted, for
    this call at this position, is not asked again. The budgets' reservation ends once that
    write is folded into the ledger (`after_write`): ended before, the call's charge would
    count neither as held nor as spent (no 80 % / 100 % finding, room for another call)."""
    started = time.monotonic()
    journal: Journal = record.journal_with if record is not None else host._append
    call = service.prepare(host.agent, request)  # a refusal here is no call: not journaled
    with tracing.span(f"chat {call.model.model}", genai.request_attributes(call)) as span:
        approved = record is not None and record.approved
        if host.agent.is_gated(CAPABILITY) and not approved:  # people, or the policy set, see
            ref = record.ref if record is not None else None  # what it may cost
            host._await_approval(CAPABILITY, json.dumps(call.summary()), ref)
        _within_budgets(host, service, call, started, journal)
        if record is not None:  # reserved: settled once the charge is journaled and folded
            record.after_write(lambda: _settle(host, service, call))
        try:
            outcome = _complete(host, service, call, started, journal)
            if span is not None:
                span.set_attributes(genai.response_attributes(outcome))
            journal(*c.event_of(outcome.event(tracing.trace_id())))
        finally:
            if record is None:  # journaled (and folded) already
                _settle(host, service, call)
    return outcome.answer()


def _settle(host: InferHost, service: InferenceService, call: Call) -> None:
    """The call's reservation ends; the budgets it took past 80 % or 100 % are told (a
    finding and the notification channels, once per window: node/inference/notices.py)."""
    host._on_loop(service.settle(call))


def _within_budgets(
    host: InferHost, service: InferenceService, call: Call, started: float, journal: Journal
) -> None:
    """Reserve the call's most within every budget; past one, refuse it or ask people."""
    exceeded = host._on_loop(service.reserve(call))
    if exceeded is None:
        return
    if exceeded.over == "ask":
        asked = {**call.summary(), **budgets.shown(exceeded)}
        host._await_approval(CAPABILITY, json.dumps(asked))
        host._on_loop(service.reserve(call, approved=True))
        return
    refusal = LimitRefusal(exceeded.message())
    service.metrics.failed(call.agent, call.model.alias, refused=True)
    journal(*c.event_of(_failed(host, call, refusal, started)))
    raise refusal


def _complete(
    host: InferHost, service: InferenceService, call: Call, started: float, journal: Journal
) -> Outcome:
    left = max(run_clock().remaining_ms() / 1000, 0.0)
    window = service.config.stream_window_ms / 1000
    deltas = StreamDeltas(host, host.run_id(), window)
    try:
        return host._on_loop(_streamed(service, call, deltas, left), left + SLACK_SECS)
    except HostError as e:
        journal(*c.event_of(_failed(host, call, e, started)))
        raise


async def _streamed(
    service: InferenceService, call: Call, deltas: StreamDeltas, left: float
) -> Outcome:
    """The call with its stream events, all sent from the loop (in order, whether the call
    ends, fails or is cancelled: a worker that gives up waiting sends nothing after)."""
    deltas.begin()
    try:
        return await service.complete(call, deltas, left)
    finally:
        deltas.close()


def _failed(host: InferHost, call: Call, error: HostError, started: float) -> c.InferenceFailed:
    return c.InferenceFailed(
        route=call.model.route,
        model=call.model.alias,
        error=error.message[:2000],
        duration_ms=int((time.monotonic() - started) * 1000),
        refused=isinstance(error, LimitRefusal),
        trace_id=tracing.trace_id(),
    )
