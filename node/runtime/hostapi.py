"""The two interfaces between the engine and the rest of the node.

`AgentHost` is the node side of the WIT `host` interface: one method per import, called on
the agent's worker thread while the agent's wasm is paused inside that call, so it may block
(an approval wait, inference, an HTTP fetch). `AgentHooks` is what the engine reports about
an agent's life (started, runs, errors, output) and where it gets the agent's tasks. The
engine knows nothing of journals, approvals, grants or HTTP: implementations plug those in.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Protocol

HostErrorKind = Literal["not-permitted", "approval-denied", "approval-timeout", "failed"]
RunKind = Literal["tick", "task", "tool", "list-tools"]
FaultKind = Literal["load", "trap", "fuel", "deadline", "memory", "err", "host"]


class HostError(Exception):
    """A host call that did not succeed; becomes the WIT `host-error` case `kind`."""

    def __init__(self, kind: HostErrorKind, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind: HostErrorKind = kind
        self.message = message


class RunParked(Exception):
    """Raised by a host call of a task's run that would wait for people (an approval): the
    run is cut at that call, its instance freed for other work, and the task is run again
    from the start once they decide, its recorded calls replayed (docs/agents.md, "A task
    waiting for people")."""


class RunClock:
    """One entry into wasm's wall-clock budget, on the worker thread that runs it.

    Host calls do not refill the budget (a loop of cheap host calls must end), except for
    time blocked waiting for an operator's approval, which the host marks with
    `exempt_from_deadline`. The bindings re-arm the epoch deadline from `remaining_ms` after
    every host call.
    """

    def __init__(self) -> None:
        self.budget_ms = 0.0
        self.started = 0.0
        self.exempt = 0.0
        # told when a run starts waiting for a person (the worker: the new version works)
        self.on_wait: Callable[[], None] | None = None
        # set while the run waits for a person (read by the thread draining the agent: such a
        # wait is not work to finish, the drain ends it at once)
        self.waiting = False
        # set by the host when it parks the run (RunParked): the trap that ends the run is no
        # fault of the agent's
        self.parked = False

    def start(self, budget_ms: int) -> None:
        self.budget_ms, self.started, self.exempt = float(budget_ms), time.monotonic(), 0.0
        self.parked = False

    def remaining_ms(self) -> float:
        return self.budget_ms - (time.monotonic() - self.started - self.exempt) * 1000


_clocks = threading.local()


def run_clock() -> RunClock:
    """The clock of the run on this thread (each agent has its own worker thread)."""
    clock = getattr(_clocks, "clock", None)
    if clock is None:
        clock = _clocks.clock = RunClock()
    return clock


@contextmanager
def exempt_from_deadline() -> Iterator[None]:
    """Time spent inside does not count against the current run's wall-clock budget."""
    start = time.monotonic()
    clock = run_clock()
    if clock.on_wait is not None:
        clock.on_wait()
    clock.waiting = True
    try:
        yield
    finally:
        clock.waiting = False
        clock.exempt += time.monotonic() - start


@dataclass(frozen=True)
class Task:
    """An A2A task to deliver to the agent's `handle-task`; `input` is JSON text. `caller` is
    who made it as the node checked it (a token's name, or the creating agent's), and
    `from_asserted` whether `from_` is only that caller's word (node/runtime/witversion.py)."""

    id: str
    from_: str
    input: str
    caller: str = ""
    from_asserted: bool = False


@dataclass(frozen=True)
class Tool:
    """One MCP tool from the agent's `list-tools`; `input_schema` is JSON text."""

    name: str
    description: str
    input_schema: str


@dataclass(frozen=True)
class ToolResult:
    """The outcome of `call-tool`: ok with JSON text, or the agent's error string. `content`:
    the text is a JSON list of MCP content items (`call-tool-content`, world 0.3.0)."""

    ok: bool
    text: str
    content: bool = False


class RunListener(Protocol):
    """Who hears what the agent says during one run as it says it (an MCP call answered as a
    stream, node/runtime/mcp_notices.py); called on the agent's worker thread."""

    def log(self, level: str, message: str) -> None: ...

    def progress(self, value: Any) -> bool: ...


class Run(NamedTuple):
    """One entry into the agent's wasm: a tick, a task, or an MCP call. A NamedTuple, not a
    frozen dataclass: one is built every tick, and a frozen dataclass's `__init__` costs
    several times as much."""

    agent: str
    run_id: str
    kind: RunKind
    detail: str = ""
    listener: RunListener | None = None


class RunResult(NamedTuple):
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

    def redact(self, text: str) -> str:
        """`text` (a fault reason, say) with secret values the agent has read masked."""
