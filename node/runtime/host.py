"""The node side of one hosted agent: every host call and life event goes to its journal.

`JournalHost` implements `AgentHost` (the WIT imports) and `AgentHooks` (the engine's
reports) for one agent. It runs on the agent's worker thread: journal writes use
`append_blocking`, so a host call returns only once its event is durable and folded; work
that belongs on the event loop (approval waits, HTTP, inference, task creation) is sent there
with `run_coroutine_threadsafe`, and gives up when the agent is being stopped. Ephemeral
stream events (tokens, run framing, tool calls) go to an `EventSink`, not the journal.

Everything an agent hands over is hostile: JSON is decoded with bounds (node.web.boundedjson),
payloads are capped (node.runtime.limits) with an error naming the limit, and secret values the
agent has read are redacted from whatever is journaled or published (node.runtime.redact).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

from eventstore.store import EventStore
from node.config.model import AgentConfig, Config, secret_env_name
from node.inference import hostcall
from node.inference.service import InferenceService
from node.ops import tracing
from node.ops.metrics import NodeMetrics
from node.ops.tracing import fetch_attributes
from node.runtime.callrecords import CallContext, CallRecorder, OpenRunsView
from node.runtime.capabilities import SAFE_METHODS, Capabilities, canonical_fetch
from node.runtime.hostapi import (
    AgentFault,
    HostError,
    Run,
    RunParked,
    RunResult,
    Task,
    exempt_from_deadline,
    run_clock,
)
from node.runtime.limits import (
    MAX_DETAIL,
    MAX_PAYLOAD_BYTES,
    MAX_STATE_KEY_BYTES,
    MAX_TEXT,
    over_limit,
)
from node.runtime.parking import ParkedRuns
from node.runtime.redact import SecretRedactor
from node.runtime.tasks import TaskQueue
from node.web import boundedjson
from projections import catalogue as c
from projections.approvals import Verdict, hash_request

log = logging.getLogger(__name__)
T = TypeVar("T")

# the built-in capability of multi-turn tasks (docs/agents.md, "Multi-turn tasks")
TASK_AWAIT = "task_await"
AWAIT_STATES = ("working", "input-required")
MAX_SUMMARY_URL = 2048  # an http_fetch URL as journaled in action.performed
TASK_EVENT_WAIT_SECS = 30.0


class ApprovalGate(Protocol):
    """What the host needs of the gate (node/services/approvals.py): journal the request, wait
    for an operator or the timeout (`policy`: the policy set rules first, and may decide)."""

    async def ask(
        self,
        agent: str,
        capability: str,
        request: str,
        timeout_secs: int | None = None,
        task_id: str | None = None,
        policy: bool = False,
        call: str | None = None,
        waiting: Callable[[], None] | None = None,
    ) -> Verdict: ...  # the outcome, with who decided and their reason


class Grants(Protocol):
    def is_active(self, agent: str, domain: str) -> bool: ...


class TaskLifecycle(Protocol):
    """node.services.tasks.TaskService: the one writer of task events, with its checks."""

    async def create(
        self, from_agent: str, to: str, input: dict[str, Any], *, task_id: str | None = None
    ) -> dict[str, Any]: ...

    async def start(self, task_id: str) -> Any: ...

    async def progress(self, task_id: str, progress: Any) -> Any: ...

    async def complete(self, task_id: str, output: dict[str, Any]) -> Any: ...

    async def fail(self, task_id: str, error: str) -> Any: ...

    async def awaits(
        self, task_id: str, *, input_required: bool, message: str | None, reply: dict[str, Any]
    ) -> Any: ...


class EventSink(Protocol):
    """The event bus for SSE: thread-safe, never blocks the caller."""

    def publish(self, agent: str, event: str, data: dict[str, Any]) -> None: ...


@dataclass
class HostServices:
    """What every JournalHost of a node shares."""

    config: Config
    store: EventStore
    metrics: NodeMetrics
    loop: asyncio.AbstractEventLoop
    capabilities: Capabilities
    inference: InferenceService
    tasks: TaskQueue
    approvals: ApprovalGate
    grants: Grants
    task_service: TaskLifecycle
    sink: EventSink
    redactor: SecretRedactor = field(default_factory=SecretRedactor)
    open_runs: OpenRunsView | None = None  # the read model of interrupted runs (call records)


def denial_message(capability: str, verdict: Verdict) -> str:
    """What the agent's approval-denied error says: who denied, and their reason if given
    (the WIT's `approval-denied(string)` is the one place the agent reads it)."""
    who = f"operator {verdict.operator!r}" if verdict.operator else "an operator"
    message = f"{who} denied {capability}"
    return f"{message}: {verdict.reason}" if verdict.reason else message


def _reason(error: Exception) -> str:
    detail = getattr(error, "detail", None)  # node.web.http.Problem
    return str(detail or error) or type(error).__name__


def _json(text: str, what: str) -> Any:
    """An agent's JSON text, bounded; HostError when it is not JSON or past a bound."""
    try:
        return boundedjson.loads(text)
    except ValueError as e:
        raise HostError("failed", f"{what} is not usable JSON: {e}") from None


def _cap(what: str, text: str, limit: int = MAX_PAYLOAD_BYTES) -> None:
    problem = over_limit(what, text, limit)
    if problem is not None:
        raise HostError("failed", problem)


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
        # this run's `task_await`: (task, input required?, message to the client)
        self._awaiting: tuple[str, bool, str | None] | None = None
        # host calls with an effect or a cost, journaled with their results (resumed runs)
        self.calls = CallRecorder(
            self.name,
            services.store,
            stopping,
            services.redactor.value,
            services.config.node.call_record_max_kb * 1024,
            services.open_runs,
        )
        self._span: Any = None  # the run's OpenTelemetry span (node/ops/tracing.py)
        # task runs parked while people decide (node/runtime/parking.py); `wake` (set by who
        # builds the runtime) makes the worker look for the task a verdict released
        self.parked = ParkedRuns(services.config.node.max_parked_runs_per_agent, self._resume)
        self.wake: Callable[[], None] = lambda: None
        self._parked_run = False  # the current run was parked: it stays open for its resume

    # ---- plumbing --------------------------------------------------------------------------

    def _append(self, type_: str, data: dict[str, Any], stream: str | None = None) -> None:
        self.s.store.append_blocking(stream or self.name, type_, self.s.redactor.value(data))

    def _note(self, type_: str, data: dict[str, Any]) -> None:
        """Journal a life event; during shutdown the store may be closed already."""
        try:
            self._append(type_, data)
        except Exception as e:
            log.warning("agent %s: cannot journal %s: %s", self.name, type_, e)

    def _publish(self, event: str, data: dict[str, Any]) -> None:
        try:
            payload = self.s.redactor.value({"agent": self.name, **data})
            self.s.sink.publish(self.name, event, payload)
        except Exception:
            log.exception("event sink failed on %s", event)

    def _on_loop(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the event loop and wait; give up if the agent is being stopped."""
        return self._result(asyncio.run_coroutine_threadsafe(coro, self.s.loop), timeout)

    def _result(self, future: concurrent.futures.Future[T], timeout: float | None = None) -> T:
        """Wait for what runs on the loop; give up if the agent is being stopped."""
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
        known: c.LogLevel
        if c.is_log_level(level):
            known = level
        else:
            message, known = f"[{level[:20]}] {message}", "info"
        logged = c.Log(level=known, message=message[:MAX_TEXT], trace_id=tracing.event_trace_id())
        self._append(*c.event_of(logged))
        self._tell(known, message[:MAX_TEXT])

    def _tell(self, level: str, message: str) -> None:
        """A log line to who listens to the current run (an MCP call's stream), redacted like
        the journal's copy."""
        listener = self._run.listener if self._run is not None else None
        if listener is not None:
            listener.log(level, self.s.redactor.text(message))

    def report_finding(self, severity: str, title: str, detail: str) -> None:
        known: c.Severity
        if c.is_severity(severity):
            known = severity
        else:
            title, known = f"[{severity[:20]}] {title}", "info"
        finding = c.Finding(
            severity=known,
            title=title[:MAX_DETAIL],
            detail=detail[:MAX_TEXT],
            trace_id=tracing.event_trace_id(),
        )
        self._append(*c.event_of(finding))

    def invoke(self, capability: str, request: str) -> str:
        name = "host.http_fetch" if capability == "http_fetch" else "host.invoke"
        with tracing.span(name, {"agent": self.name, "capability": capability}):
            return self._invoke(capability, request)

    def _invoke(self, capability: str, request: str) -> str:
        if not self.agent.capabilities.get(capability):
            raise HostError(
                "not-permitted", f"capability {capability} is not enabled for agent {self.name}"
            )
        _cap(f"the {capability} request", request)
        parsed = _json(request, f"the {capability} request")
        if capability == "http_fetch":  # the one form judged, journaled and sent
            parsed, request = canonical_fetch(parsed, request)
        if capability == TASK_AWAIT:
            if self.agent.is_gated(capability):
                self._await_approval(capability, request)
            return self._task_await(parsed)
        shown = self.s.redactor.text(request)
        return self.calls.call(
            "invoke",
            capability,
            shown,
            lambda call: self._perform(capability, request, parsed, call),
        )

    def _perform(self, capability: str, request: str, parsed: Any, call: CallContext) -> str:
        """An action or an http_fetch, live: approved first when gated (unless an approval
        given before the run was interrupted covers it), sent with the call's key."""
        if self.agent.is_gated(capability) and not call.approved:
            self._await_approval(capability, request, call.ref)
        if capability == "http_fetch":
            method = str(parsed.get("method", "GET")).upper()
            key = None if method in SAFE_METHODS else call.key  # a GET's run opens with its record
            tracing.annotate(fetch_attributes(method, parsed["url"]))
            result = self._on_loop(
                self.s.capabilities.http_fetch(parsed, self.agent.http.allow_hosts, key)
            )
            summary = {
                "method": str(parsed.get("method", "GET")).upper()[:20],
                "url": parsed["url"][:MAX_SUMMARY_URL],
                "status": result["status"],
            }
        else:
            action = self.s.capabilities.action(self.name, capability, parsed, call.key)
            result = self._on_loop(action)
            summary = {"request": parsed, "status": result["status"]}
        done = c.ActionPerformed(
            capability=capability, trace_id=tracing.event_trace_id(), **summary
        )
        call.journal_with(*c.event_of(done))
        tracing.annotate({"http.response.status_code": result["status"]})
        return json.dumps(result)

    def _task_await(self, request: Any) -> str:
        """`invoke("task_await", {task, state?, message?})`: when this run of `task` returns,
        the task is not completed but awaits its client's next message, as `working` or
        `input-required` (docs/agents.md, "Multi-turn tasks"); the run's output is the reply."""
        run = self._run
        if not isinstance(request, dict) or not isinstance(request.get("task"), str):
            raise HostError("failed", "task_await needs a request object with a string `task`")
        if run is None or run.kind != "task" or run.detail != request["task"]:
            raise HostError("failed", "task_await names the task this run of handle-task handles")
        state = request.get("state", "working")
        message = request.get("message")
        if state not in AWAIT_STATES:
            raise HostError("failed", f"task_await `state` is one of {', '.join(AWAIT_STATES)}")
        if message is not None and (not isinstance(message, str) or len(message) > MAX_TEXT):
            raise HostError("failed", f"task_await `message` is a string of at most {MAX_TEXT}")
        self._awaiting = (run.detail, state == "input-required", message)
        return json.dumps({"awaiting": state})

    def _await_approval(self, capability: str, request: str, call: str | None = None) -> None:
        # What the operator sees and approves, and what its hash binds: the request with the
        # secrets the agent read masked; approved, it is performed with the real values.
        shown = self.s.redactor.text(request)
        task_id = self._run.detail if self._run is not None and self._run.kind == "task" else None
        by_policy = self.agent.decided_by_policy(capability)
        waiting = {"agent": self.name, "capability": capability, "policy": by_policy}
        with exempt_from_deadline(), tracing.span("approval.wait", waiting):
            verdict = self._decision(capability, shown, task_id, by_policy, call)
        if verdict.outcome == "deny":
            raise HostError("approval-denied", denial_message(capability, verdict))
        if verdict.outcome != "approve":
            raise HostError(
                "approval-timeout",
                f"no decision on {capability} within {self.agent.approval_timeout_secs} s; "
                "retry later",
            )

    def _decision(
        self, capability: str, shown: str, task_id: str | None, policy: bool, call: str | None
    ) -> Verdict:
        """The verdict on the request, or RunParked when people decide it (parking.py)."""

        def ask(waiting: Callable[[], None] | None) -> concurrent.futures.Future[Verdict]:
            asked = self.s.approvals.ask(
                self.name,
                capability,
                shown,
                self.agent.approval_timeout_secs,
                task_id,
                policy=policy,
                call=call,
                waiting=waiting,
            )
            return asyncio.run_coroutine_threadsafe(asked, self.s.loop)

        request_hash = hash_request(shown)
        try:
            future = self.parked.verdict(ask, task_id, call, request_hash, self.stopping)
        except RunParked:  # the run ends here: people decide while the agent works on
            self._parked_run = True
            run_clock().parked = True
            log.info("agent %s: task %s parked until %s is decided", self.name, task_id, capability)
            raise
        return self._result(future)

    def _resume(self, task_id: str) -> bool:
        """A parked run's verdict arrived (on the loop): its task is run again, if still open."""
        if not self.s.tasks.release(self.name, [task_id]):
            return False
        self.wake()
        return True

    def get_secret(self, domain: str, key: str) -> str:
        if not self._grant_active(domain):
            raise HostError("not-permitted", f"no active grant of {domain} for {self.name}")
        value = self.s.config.secrets.get(domain, {}).get(key)
        if value is None and (env_name := secret_env_name(domain, key)) is not None:
            value = os.environ.get(env_name)
        if value is None:
            raise HostError("failed", f"no secret {key[:200]} in domain {domain[:200]}")
        self.s.redactor.learn(domain, key, value)
        self._append(*c.event_of(c.SecretAccessed(domain=domain, key=key)))
        return str(value)

    def _grant_active(self, domain: str) -> bool:
        """The journal's grant and this instance's definition both say yes: a grant that is
        still active (an operator restored it) never reaches a revision that stopped asking."""
        return domain in self.agent.grants.domains and self.s.grants.is_active(self.name, domain)

    def infer(self, request: str) -> str:
        shown = self.s.redactor.text(request)
        return self.calls.call(
            "infer", "", shown, lambda call: hostcall.infer(self, self.s.inference, request, call)
        )

    def run_id(self) -> str:
        return self._run.run_id if self._run else ""

    def create_task(self, to: str, input: str) -> str:
        _cap("the task input", input)
        data = self.s.redactor.value(_json(input, "the task input"))
        if not isinstance(data, dict):
            raise HostError("failed", "task input must be a JSON object")
        shown = json.dumps(data, sort_keys=True)
        with tracing.span("host.create_task", {"agent": self.name, "agent.task.to": to}):
            return self.calls.call(
                "create_task", to, shown, lambda call: self._create(to, data, call)
            )

    def _create(self, to: str, data: dict[str, Any], call: CallContext) -> str:
        """The task's id derives from the call's key: made again after an interruption, the
        same task is found rather than a second one created."""
        task_id = call.key and str(uuid.UUID(call.key[:32]))
        created = self._on_loop(self.s.task_service.create(self.name, to, data, task_id=task_id))
        tracing.annotate({"agent.task.id": str(created["id"])})
        return str(created["id"])

    def task_progress(self, task_id: str, progress: str) -> None:
        run = self._run
        if task_id == "" and run is not None and run.kind == "tool":
            self._tool_progress(run, progress)
            return
        if not self.s.tasks.is_open(self.name, task_id):
            self.log("warn", f"progress for task {task_id}, which this agent is not handling")
            return
        problem = over_limit("the task progress", progress)
        if problem is not None:  # no error channel: the agent traps with this reason
            raise ValueError(problem)
        try:
            value: Any = boundedjson.loads(progress)
        except boundedjson.JsonBoundsError as e:
            raise ValueError(f"the task progress is not usable JSON: {e}") from None
        except ValueError:
            value = progress
        self._on_loop(self.s.task_service.progress(task_id, self.s.redactor.value(value)))

    def _tool_progress(self, run: Run, progress: str) -> None:
        """`task-progress("", ...)` during an MCP tool call: the call's progress, sent to its
        caller when it asked for progress (never journaled: a tool call is no task)."""
        try:
            value = boundedjson.loads(progress)
        except ValueError:
            value = None
        if run.listener is not None and not run.listener.progress(self.s.redactor.value(value)):
            self.log("warn", 'tool progress must be {"progress": number, "total"?, "message"?}')

    def _states(self) -> dict[str, str]:
        if self._state is None:  # durable state is the fold of the agent's state.set events
            state: dict[str, str] = {}
            for envelope in self.s.store.iter_stream(self.name):
                if envelope.event.type == c.STATE_SET:
                    payload = c.payload_of(envelope)
                    if isinstance(payload, c.StateSet):
                        state[payload.key] = payload.value
                elif envelope.event.type == c.AGENT_RETIRED:  # a removed deployment's ends
                    state.clear()
            self._state = state
        return self._state

    def state_get(self, key: str) -> str | None:
        return self._states().get(key)

    def state_set(self, key: str, value: str) -> None:
        # No error channel in the WIT: a refusal traps the agent with the limit as reason.
        for problem in (
            over_limit("the state key", key, MAX_STATE_KEY_BYTES),
            over_limit(f"the value of state key {key[:100]!r}", value),
        ):
            if problem is not None:
                raise ValueError(problem)
        states = self._states()
        self._append(
            *c.event_of(c.StateSet(key=key, value=value, trace_id=tracing.event_trace_id()))
        )
        states[key] = self.s.redactor.text(value)  # what the journal holds, as after a restart

    # ---- AgentHooks ------------------------------------------------------------------------

    def agent_started(self, restart_count: int) -> None:
        self.calls.reset()  # a new instance resumes the runs the journal holds as interrupted
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
        self.parked.cancel_all()  # their requests stay pending: the next instance adopts them
        self._note(*c.event_of(c.AgentStopped()))

    def status_changed(self, status: str) -> None:
        self._publish("agent_status", {"status": status})

    def run_started(self, run: Run) -> None:
        self._run = run
        self._awaiting = None
        self.calls.run_started(run)
        self._span = tracing.begin(f"agent.{run.kind}", tracing.run_attributes(run))
        frame = {"run_id": run.run_id, "threadId": self.name, "runId": run.run_id}
        if self._span is not None:
            frame["trace_id"] = tracing.trace_id()
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
        parked, self._parked_run = self._parked_run, False
        try:
            if parked:  # left open: the task's next run resumes it
                self.calls.run_parked()
            else:
                self.calls.run_finished(run, faulted=result.error is not None)
        except Exception as e:  # the store closing under a stop: the run stays open
            log.warning("agent %s: cannot close run %s: %s", self.name, run.run_id, e)
        trace_id = tracing.trace_id() if self._span is not None else ""
        tracing.end(self._span, result.error, {"agent.fuel": result.fuel_consumed})
        self._span = None
        if result.fuel_consumed:
            self.s.metrics.fuel_consumed.labels(agent=self.name).inc(result.fuel_consumed)
        frame = {"run_id": run.run_id, "threadId": self.name, "runId": run.run_id}
        if trace_id:
            frame["trace_id"] = trace_id
        if run.kind == "tool":
            self._publish(
                "TOOL_CALL_END",
                {**frame, "tool_call_id": run.run_id, "toolCallId": run.run_id, "tool": run.detail},
            )
        if result.error:
            self._publish("RUN_ERROR", {**frame, "message": result.error})
        else:
            finished = {**frame, "duration_ms": result.duration_ms}
            if parked:  # its task goes on in a later run, once people decide
                finished["parked"] = True
            self._publish("RUN_FINISHED", finished)
        if run.kind == "tick":
            self._publish("agent_complete", {"duration_ms": result.duration_ms})

    def output(self, stream: Literal["stdout", "stderr"], line: str) -> None:
        level: c.LogLevel = "info" if stream == "stdout" else "warn"
        traced = tracing.event_trace_id()
        logged = c.Log(level=level, message=line[:MAX_TEXT], stream=stream, trace_id=traced)
        self._note(*c.event_of(logged))
        self._tell(level, line[:MAX_TEXT])

    def next_task(self) -> Task | None:
        return self.s.tasks.take(self.name)

    def task_started(self, task: Task) -> None:
        self._task_event(self.s.task_service.start(task.id))

    def task_completed(self, task: Task, output: str) -> None:
        problem = over_limit("the task output", output)
        if problem is not None:
            self.task_failed(task, problem)
            return
        try:
            value = boundedjson.loads(output)
        except ValueError as e:
            self.task_failed(task, f"the agent's output is not usable JSON: {e}")
            return
        if not isinstance(value, dict):
            self.task_failed(task, "the agent's output is not a JSON object")
            return
        result: dict[str, Any] = self.s.redactor.value(value)
        awaiting, self._awaiting = self._awaiting, None
        if awaiting is not None and awaiting[0] == task.id:  # the run left it open
            _, input_required, said = awaiting
            said = self.redact(said) if said is not None else None
            self._task_event(
                self.s.task_service.awaits(
                    task.id, input_required=input_required, message=said, reply=result
                )
            )
            return
        self._task_event(self.s.task_service.complete(task.id, result))

    def task_failed(self, task: Task, error: str) -> None:
        self._task_event(self.s.task_service.fail(task.id, self.redact(error)[:MAX_TEXT]))

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

    def redact(self, text: str) -> str:
        return self.s.redactor.text(text)
