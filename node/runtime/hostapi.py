"""The two interfaces between the engine and the rest of the node.

`AgentHost` is the node side of the WIT `host` interface: one method per import, called on
the agent's worker thread while the agent's wasm is paused inside that call, so it may block
(an approval wait, inference, an HTTP fetch). `AgentHooks` is what the engine reports about
an agent's life (started, runs, errors, output) and where it gets the agent's tasks. The
engine knows nothing of journals, approvals, grants or HTTP: implementations plug those in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

HostErrorKind = Literal["not-permitted", "approval-denied", "approval-timeout", "failed"]
RunKind = Literal["tick", "task", "tool", "list-tools"]
FaultKind = Literal["load", "trap", "fuel", "deadline", "memory", "err", "host"]


class HostError(Exception):
    """A host call that did not succeed; becomes the WIT `host-error` case `kind`."""

    def __init__(self, kind: HostErrorKind, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind: HostErrorKind = kind
        self.message = message


@dataclass(frozen=True)
class Task:
    """An A2A task to deliver to the agent's `handle-task`; `input` is JSON text."""

    id: str
    from_: str
    input: str


@dataclass(frozen=True)
class Tool:
    """One MCP tool from the agent's `list-tools`; `input_schema` is JSON text."""

    name: str
    description: str
    input_schema: str


@dataclass(frozen=True)
class ToolResult:
    """The outcome of `call-tool`: ok with JSON text, or the agent's error string."""

    ok: bool
    text: str


@dataclass(frozen=True)
class Run:
    """One entry into the agent's wasm: a tick, a task, or an MCP call."""

    agent: str
    run_id: str
    kind: RunKind
    detail: str = ""


@dataclass(frozen=True)
class RunResult:
    duration_ms: int
    fuel_consumed: int
    error: str | None = None


@dataclass(frozen=True)
class AgentFault:
    """Why an agent stopped working: it goes to `error` and restarts with backoff."""

    kind: FaultKind
    reason: str


class AgentHost(Protocol):
    """The WIT imports. Called on the agent's worker thread; may block."""

    def log(self, level: str, message: str) -> None: ...

    def report_finding(self, severity: str, title: str, detail: str) -> None: ...

    def invoke(self, capability: str, request: str) -> str:
        """Raises HostError."""
        ...

    def get_secret(self, domain: str, key: str) -> str:
        """Raises HostError."""
        ...

    def infer(self, request: str) -> str:
        """Raises HostError."""
        ...

    def create_task(self, to: str, input: str) -> str:
        """Raises HostError."""
        ...

    def task_progress(self, task_id: str, progress: str) -> None: ...

    def state_get(self, key: str) -> str | None: ...

    def state_set(self, key: str, value: str) -> None: ...


class AgentHooks(Protocol):
    """What the engine reports about one agent. Called on the agent's worker thread."""

    def agent_started(self, restart_count: int) -> None:
        """A fresh instance is ready; restart_count is 0 on the first start."""

    def agent_errored(self, fault: AgentFault, retry_in_ms: int) -> None: ...

    def agent_stopped(self) -> None: ...

    def status_changed(self, status: str) -> None:
        """running, idle, error or stopped (the status API's values)."""

    def run_started(self, run: Run) -> None: ...

    def run_finished(self, run: Run, result: RunResult) -> None: ...

    def output(self, stream: Literal["stdout", "stderr"], line: str) -> None:
        """A line the agent wrote to stdout or stderr."""

    def next_task(self) -> Task | None:
        """The oldest task assigned to this agent and not yet delivered, if any."""

    def task_started(self, task: Task) -> None: ...

    def task_completed(self, task: Task, output: str) -> None: ...

    def task_failed(self, task: Task, error: str) -> None: ...
