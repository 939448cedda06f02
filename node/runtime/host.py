"""The node side of one hosted agent: every host call and life event goes to its journal.

`JournalHost` implements `AgentHost` (the WIT imports) and `AgentHooks` (the engine's
reports) for one agent. It runs on the agent's worker thread: journal writes use
`append_blocking`, so a host call returns only once its event is durable and folded; work
that belongs on the event loop (approval waits, HTTP, inference, task creation) is sent there
with `run_coroutine_threadsafe`, and gives up when the agent is being stopped. Ephemeral
stream events (tokens, run framing, tool calls) go to an `EventSink`, not the journal.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from eventstore.store import EventStore
from node.config import AgentConfig, Config
from node.metrics import NodeMetrics
from node.runtime.capabilities import Capabilities
from node.runtime.hostapi import AgentFault, HostError, Run, RunResult, Task
from node.runtime.inference import InferenceClient, parse_request
from node.runtime.tasks import TaskQueue
from projections import catalogue as c

log = logging.getLogger(__name__)
T = TypeVar("T")

LOG_LEVELS = c.LOG_LEVELS
SEVERITIES = c.SEVERITIES
MAX_TEXT = 64 * 1024
MAX_DETAIL = 1000
TASK_EVENT_WAIT_SECS = 30.0


class ApprovalGate(Protocol):
    """Issue 3's gate: journals the request, waits for an operator or the timeout."""

    async def request(
        self, agent: str, capability: str, detail: str, timeout_secs: int
    ) -> str: ...  # "approve" | "deny" | "timeout"


class Grants(Protocol):
    def is_active(self, agent: str, domain: str) -> bool: ...


class TaskLifecycle(Protocol):
    """node.services.tasks.TaskService: the one writer of task events, with its checks."""

    async def create(self, from_agent: str, to: str, input: dict[str, Any]) -> dict[str, Any]: ...

    async def start(self, task_id: str) -> Any: ...

    async def progress(self, task_id: str, progress: Any) -> Any: ...

    async def complete(self, task_id: str, output: dict[str, Any]) -> Any: ...

    async def fail(self, task_id: str, error: str) -> Any: ...


class EventSink(Protocol):
    """The event bus for SSE: thread-safe, never blocks the caller."""

    def publish(self, agent: str, event: str, data: dict[str, Any]) -> None: ...


class NullSink:
    def publish(self, agent: str, event: str, data: dict[str, Any]) -> None:
        pass


@dataclass
class HostServices:
    """What every JournalHost of a node shares."""

    config: Config
    store: EventStore
    metrics: NodeMetrics
    loop: asyncio.AbstractEventLoop
    capabilities: Capabilities
    inference: InferenceClient
    tasks: TaskQueue
    approvals: ApprovalGate
    grants: Grants
    task_service: TaskLifecycle
    sink: EventSink = field(default_factory=NullSink)


def _reason(error: Exception) -> str:
    detail = getattr(error, "detail", None)  # node.http.Problem
    return str(detail or error) or type(error).__name__


def secret_env_name(domain: str, key: str) -> str:
    """AGENT_SECRET_<DOMAIN>_<KEY>, upper case, other characters as `_`."""
    return re.sub(r"[^A-Z0-9]", "_", f"AGENT_SECRET_{domain}_{key}".upper())


class JournalHost:
    def __init__(
        self, agent: AgentConfig, services: HostServices, stopping: threading.Event
    ) -> None:
        self.agent = agent
        self.name = agent.name
        self.s = services
        self.stopping = stopping
        self._state: dict[str, str] | None = None
        self._run: Run | None = None

    # ---- plumbing --------------------------------------------------------------------------

    def _append(self, type_: str, data: dict[str, Any], stream: str | None = None) -> None:
        self.s.store.append_blocking(stream or self.name, type_, data)

    def _note(self, type_: str, data: dict[str, Any]) -> None:
        """Journal a life event; during shutdown the store may be closed already."""
        try:
            self._append(type_, data)
        except Exception as e:
            log.warning("agent %s: cannot journal %s: %s", self.name, type_, e)

    def _publish(self, event: str, data: dict[str, Any]) -> None:
        try:
            self.s.sink.publish(self.name, event, {"agent": self.name, **data})
        except Exception:
            log.exception("event sink failed on %s", event)

    def _on_loop(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the event loop and wait; give up if the agent is being stopped."""
        future = asyncio.run_coroutine_threadsafe(coro, self.s.loop)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                return future.result(0.1)
            except concurrent.futures.TimeoutError:
                if self.stopping.is_set():
                    future.cancel()
                    raise HostError("failed", "the agent is being stopped") from None
                if deadline is not None and time.monotonic() > deadline:
                    future.cancel()
                    raise HostError("failed", "the host call timed out") from None
            except concurrent.futures.CancelledError:
                raise HostError("failed", "the host call was cancelled") from None
            except HostError:
                raise
            except Exception as e:  # a service refused (a Problem, the gate closing, ...)
                raise HostError("failed", _reason(e)) from e

    # ---- AgentHost -------------------------------------------------------------------------

    def log(self, level: str, message: str) -> None:
        if level not in LOG_LEVELS:
            message, level = f"[{level[:20]}] {message}", "info"
        self._append(*c.event_of(c.Log(level=level, message=message[:MAX_TEXT])))

    def report_finding(self, severity: str, title: str, detail: str) -> None:
        if severity not in SEVERITIES:
            title, severity = f"[{severity[:20]}] {title}", "info"
        finding = c.Finding(severity=severity, title=title[:MAX_DETAIL], detail=detail[:MAX_TEXT])
        self._append(*c.event_of(finding))

    def invoke(self, capability: str, request: str) -> str:
        if not self.agent.capabilities.get(capability):
            raise HostError(
                "not-permitted", f"capability {capability} is not enabled for agent {self.name}"
            )
        try:
            parsed = json.loads(request)
        except ValueError:
            raise HostError("failed", f"{capability} request is not JSON") from None
        if self.agent.is_gated(capability):
            self._await_approval(capability, request)
        if capability == "http_fetch":
            result = self._on_loop(
                self.s.capabilities.http_fetch(parsed, self.agent.http.allow_hosts)
            )
            summary = {
                "method": str(parsed.get("method", "GET")).upper(),
                "url": parsed["url"],
                "status": result["status"],
            }
        else:
            result = self._on_loop(self.s.capabilities.action(self.name, capability, parsed))
            summary = {"request": parsed, "status": result["status"]}
        self._append(*c.event_of(c.ActionPerformed(capability=capability, **summary)))
        return json.dumps(result)

    def _await_approval(self, capability: str, request: str) -> None:
        gate = self.s.approvals
        detail = f"{capability}: {request}"
        if len(detail) > MAX_DETAIL:
            detail = detail[: MAX_DETAIL - 1] + "…"
        timeout = self.agent.approval_timeout_secs
        decision = self._on_loop(gate.request(self.name, capability, detail, timeout))
        if decision == "deny":
            raise HostError("approval-denied", f"an operator denied {capability}")
        if decision != "approve":
            raise HostError(
                "approval-timeout", f"no decision on {capability} within {timeout} s; retry later"
            )

    def get_secret(self, domain: str, key: str) -> str:
        if not self._grant_active(domain):
            raise HostError("not-permitted", f"no active grant of {domain} for {self.name}")
        value = self.s.config.secrets.get(domain, {}).get(key)
        if value is None:
            value = os.environ.get(secret_env_name(domain, key))
        if value is None:
            raise HostError("failed", f"no secret {key} in domain {domain}")
        self._append(*c.event_of(c.SecretAccessed(domain=domain, key=key)))
        return value

    def _grant_active(self, domain: str) -> bool:
        return self.s.grants.is_active(self.name, domain)

    def infer(self, request: str) -> str:
        route, prompt, max_tokens = parse_request(request, self.s.config.inference.default_route)
        self.s.metrics.inference_requests.labels(route=route).inc()
        run_id = self._run.run_id if self._run else ""
        message_id = uuid.uuid4().hex
        frame = {"run_id": run_id, "threadId": self.name, "runId": run_id, "messageId": message_id}
        self._publish("TEXT_MESSAGE_START", {**frame, "role": "assistant"})

        def on_token(text: str) -> None:
            self._publish("token", {"text": text})
            self._publish("TEXT_MESSAGE_CONTENT", {**frame, "text": text, "delta": text})

        try:
            text = self._on_loop(self.s.inference.complete(route, prompt, max_tokens, on_token))
        finally:
            self._publish("TEXT_MESSAGE_END", frame)
        self._append(*c.event_of(c.InferenceCompleted(route=route, chars=len(text))))
        return text

    def create_task(self, to: str, input: str) -> str:
        try:
            data = json.loads(input)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise HostError("failed", "task input must be a JSON object")
        created = self._on_loop(self.s.task_service.create(self.name, to, data))
        return str(created["id"])

    def task_progress(self, task_id: str, progress: str) -> None:
        if not self.s.tasks.is_open(self.name, task_id):
            self.log("warn", f"progress for task {task_id}, which this agent is not handling")
            return
        try:
            value: Any = json.loads(progress)
        except ValueError:
            value = progress[:MAX_TEXT]
        self._on_loop(self.s.task_service.progress(task_id, value))

    def _states(self) -> dict[str, str]:
        if self._state is None:  # durable state is the fold of the agent's state.set events
            state: dict[str, str] = {}
            for envelope in self.s.store.iter_stream(self.name):
                if envelope.event.type == c.STATE_SET:
                    data = envelope.event.data
                    state[str(data.get("key"))] = str(data.get("value"))
            self._state = state
        return self._state

    def state_get(self, key: str) -> str | None:
        return self._states().get(key)

    def state_set(self, key: str, value: str) -> None:
        states = self._states()
        self._append(*c.event_of(c.StateSet(key=key, value=value)))
        states[key] = value

    # ---- AgentHooks ------------------------------------------------------------------------

    def agent_started(self, restart_count: int) -> None:
        if restart_count:
            self.s.metrics.agent_restarts.labels(agent=self.name).inc()
            self._note(*c.event_of(c.AgentRestarted(restart_count=restart_count)))
        else:
            self._note(*c.event_of(c.AgentStarted()))

    def agent_errored(self, fault: AgentFault, retry_in_ms: int) -> None:
        reason = fault.reason[:MAX_TEXT]  # a trap's backtrace can be long; the catalogue's bound
        errored = c.AgentErrored(error=reason, kind=fault.kind, retry_in_ms=retry_in_ms)
        self._note(*c.event_of(errored))

    def agent_stopped(self) -> None:
        self._note(*c.event_of(c.AgentStopped()))

    def status_changed(self, status: str) -> None:
        self._publish("agent_status", {"status": status})

    def run_started(self, run: Run) -> None:
        self._run = run
        frame = {"run_id": run.run_id, "threadId": self.name, "runId": run.run_id}
        self._publish("RUN_STARTED", {**frame, "kind": run.kind})
        if run.kind == "tool":  # an MCP call: one AG-UI tool call inside its run
            self._publish(
                "TOOL_CALL_START",
                {
                    **frame,
                    "tool_call_id": run.run_id,
                    "toolCallId": run.run_id,
                    "tool": run.detail,
                    "toolCallName": run.detail,
                },
            )

    def run_finished(self, run: Run, result: RunResult) -> None:
        self._run = None
        if result.fuel_consumed:
            self.s.metrics.fuel_consumed.labels(agent=self.name).inc(result.fuel_consumed)
        frame = {"run_id": run.run_id, "threadId": self.name, "runId": run.run_id}
        if run.kind == "tool":
            self._publish(
                "TOOL_CALL_END",
                {**frame, "tool_call_id": run.run_id, "toolCallId": run.run_id, "tool": run.detail},
            )
        if result.error:
            self._publish("RUN_ERROR", {**frame, "message": result.error})
        else:
            self._publish("RUN_FINISHED", {**frame, "duration_ms": result.duration_ms})
        if run.kind == "tick":
            self._publish("agent_complete", {"duration_ms": result.duration_ms})

    def output(self, stream: str, line: str) -> None:
        level = "info" if stream == "stdout" else "warn"
        self._note(*c.event_of(c.Log(level=level, message=line[:MAX_TEXT], stream=stream)))

    def next_task(self) -> Task | None:
        return self.s.tasks.take(self.name)

    def task_started(self, task: Task) -> None:
        self._task_event(self.s.task_service.start(task.id))

    def task_completed(self, task: Task, output: str) -> None:
        try:
            value = json.loads(output)
        except ValueError:
            value = None
        if not isinstance(value, dict):
            self.task_failed(task, "the agent's output is not a JSON object")
            return
        self._task_event(self.s.task_service.complete(task.id, value))

    def task_failed(self, task: Task, error: str) -> None:
        self._task_event(self.s.task_service.fail(task.id, error[:MAX_TEXT]))

    def _task_event(self, transition: Coroutine[Any, Any, Any]) -> None:
        """A task transition the worker reports, through the task service's checks. It waits
        even while the agent is being stopped (a finished task must not be lost); one that no
        longer fits (canceled meanwhile) or cannot be journaled any more is logged, not raised:
        the worker has nothing to do about it."""
        try:
            future = asyncio.run_coroutine_threadsafe(transition, self.s.loop)
        except RuntimeError as e:  # the loop is closed: the node is gone
            transition.close()
            log.warning("agent %s: task event not journaled: %s", self.name, e)
            return
        try:
            future.result(TASK_EVENT_WAIT_SECS)
        except Exception as e:
            future.cancel()
            log.warning("agent %s: task event not journaled: %s", self.name, _reason(e))
