"""An agent host that keeps everything in memory: no journal, no HTTP, no operators.

It is a real implementation of `AgentHost` and `AgentHooks`, used to run the engine on its
own (tests of the engine, the runtime benchmark, trying an agent out). Decisions that the
node takes from operators (approvals) or the broker (grants) come from plain attributes.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from node.runtime.hostapi import AgentFault, HostError, Run, RunResult, Task, exempt_from_deadline
from projections import catalogue as c

Decide = Callable[[str, str], str]  # (capability, request) -> "approve" | "deny" | "timeout"


@dataclass
class MemoryHost:
    agent: str
    capabilities: set[str] = field(default_factory=set)
    gated: set[str] = field(default_factory=set)
    decide: Decide = lambda capability, request: "approve"
    secrets: dict[tuple[str, str], str] = field(default_factory=dict)
    granted: set[str] = field(default_factory=set)
    infer_reply: str = "ok"
    state: dict[str, str] = field(default_factory=dict)
    # the newest `max_events` are kept (`dropped_events` counts the rest): an agent ticking
    # back to back records about six a tick, and a list growing by those for as long as it
    # runs cost the tick page faults and collector passes on fresh memory (issue 26)
    max_events: int = 10_000
    events: deque[tuple[str, dict[str, Any]]] = field(default_factory=deque)
    dropped_events: int = 0
    tasks: deque[Task] = field(default_factory=deque)
    threads: set[str] = field(default_factory=set)  # threads that called this host
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ids: Any = field(default_factory=lambda: itertools.count(1))
    _callers: set[threading.Thread] = field(default_factory=set)  # the threads in `threads`

    def __post_init__(self) -> None:
        self.events = deque(self.events, maxlen=self.max_events)

    def record(self, type_: str, **data: Any) -> None:
        # called several times a tick: the keyword dict is the event (no copy), and a
        # thread's name is looked up once, not on every call
        data["ts"] = time.monotonic()
        thread = threading.current_thread()
        with self._lock:
            if len(self.events) == self.max_events:
                self.dropped_events += 1
            self.events.append((type_, data))
            if thread not in self._callers:
                self._callers.add(thread)
                self.threads.add(thread.name)

    def of_type(self, type_: str) -> list[dict[str, Any]]:
        with self._lock:
            return [data for t, data in self.events if t == type_]

    # ---- AgentHost -----------------------------------------------------------------------

    def log(self, level: str, message: str) -> None:
        self.record(c.Log.type, level=level, message=message)

    def report_finding(self, severity: str, title: str, detail: str) -> None:
        self.record(c.Finding.type, severity=severity, title=title, detail=detail)

    def invoke(self, capability: str, request: str) -> str:
        if capability not in self.capabilities:
            raise HostError("not-permitted", f"capability {capability} is not enabled")
        if capability in self.gated:
            self.record(c.ApprovalRequested.type, capability=capability, detail=request)
            with exempt_from_deadline():  # an operator's time, as in the node's host
                decision = self.decide(capability, request)
            self.record(c.ApprovalDecided.type, capability=capability, decision=decision)
            if decision == "deny":
                raise HostError("approval-denied", f"{capability} denied by operator")
            if decision == "timeout":
                raise HostError("approval-timeout", f"no decision on {capability}")
        self.record("action", capability=capability, request=request)
        return '{"status": "done"}'

    def get_secret(self, domain: str, key: str) -> str:
        if domain not in self.granted:
            raise HostError("not-permitted", f"no active grant for {domain}")
        try:
            value = self.secrets[(domain, key)]
        except KeyError:
            raise HostError("failed", f"no secret {domain}/{key}") from None
        self.record(c.SecretAccessed.type, domain=domain, key=key)
        return value

    def infer(self, request: str) -> str:
        self.record("inference", request=request)
        return self.infer_reply

    def create_task(self, to: str, input: str) -> str:
        task_id = f"task-{next(self._ids)}"
        self.record(c.TaskCreated.type, id=task_id, to=to, input=input)
        return task_id

    def task_progress(self, task_id: str, progress: str) -> None:
        self.record(c.TaskProgress.type, id=task_id, progress=progress)

    def state_get(self, key: str) -> str | None:
        with self._lock:
            return self.state.get(key)

    def state_set(self, key: str, value: str) -> None:
        with self._lock:
            self.state[key] = value
        self.record(c.StateSet.type, key=key, value=value)

    # ---- AgentHooks ----------------------------------------------------------------------

    def agent_started(self, restart_count: int) -> None:
        self.record(c.AgentStarted.type, restart_count=restart_count)

    def agent_errored(self, fault: AgentFault, retry_in_ms: int) -> None:
        self.record(
            c.AgentErrored.type, kind=fault.kind, error=fault.reason, retry_in_ms=retry_in_ms
        )

    def agent_stopped(self) -> None:
        self.record(c.AgentStopped.type)

    def status_changed(self, status: str) -> None:
        self.record("status", status=status)

    def run_started(self, run: Run) -> None:
        self.record("run.started", run_id=run.run_id, kind=run.kind, detail=run.detail)

    def run_finished(self, run: Run, result: RunResult) -> None:
        self.record(
            "run.finished",
            run_id=run.run_id,
            kind=run.kind,
            duration_ms=result.duration_ms,
            fuel=result.fuel_consumed,
            error=result.error,
        )

    def output(self, stream: str, line: str) -> None:
        self.record("output", stream=stream, line=line)

    def next_task(self) -> Task | None:
        with self._lock:
            return self.tasks.popleft() if self.tasks else None

    def task_started(self, task: Task) -> None:
        self.record(c.TaskStarted.type, id=task.id)

    def task_completed(self, task: Task, output: str) -> None:
        self.record(c.TaskCompleted.type, id=task.id, output=output)

    def redact(self, text: str) -> str:
        return text  # nothing here is journaled or replicated

    def task_failed(self, task: Task, error: str) -> None:
        self.record(c.TaskFailed.type, id=task.id, error=error)
