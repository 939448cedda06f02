"""The agents of a node: one engine, one worker per agent, and the calls the API needs.

The async methods are for aiohttp handlers: they hand the work to the agent's worker thread
and await its future, so the event loop never runs wasm.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Container, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path

from node.runtime.engine import AgentEngine
from node.runtime.hostapi import AgentHooks, AgentHost, RunListener, Tool, ToolResult
from node.runtime.instance import AgentInstance
from node.runtime.outputguard import OutputGuard
from node.runtime.spec import AgentSpec, RuntimeOptions
from node.runtime.status import AgentStatus
from node.runtime.worker import STOPPED, AgentWorker, Resolver, run_tick

log = logging.getLogger(__name__)

# Builds the node side of one agent; `stopping` is set when the agent is being stopped, so
# a host call blocked on an approval or a fetch can give up.
HostFactory = Callable[[AgentSpec, threading.Event], tuple[AgentHost, AgentHooks]]


@dataclass(frozen=True)
class InstanceEnd:
    """A lifecycle change ended an agent's instance (never said at shutdown)."""

    agent: str
    reason: str  # "suspended", "upgraded to revision 3", "removed", ...
    handed_over: tuple[str, ...]  # tasks it was cut in, left open for the next instance


# Told (on the thread that runs the change) once the old instance has ended.
InstanceEnded = Callable[[InstanceEnd], None]


OPERATOR_STOPPED = "stopped by an operator (`agents start` starts it)"


class UnknownAgentError(KeyError):
    pass


class AgentRuntime:
    def __init__(
        self,
        specs: Iterable[AgentSpec],
        host_factory: HostFactory,
        options: RuntimeOptions | None = None,
        resolve: Resolver | None = None,
    ) -> None:
        options = options or RuntimeOptions()
        self._own_output_dir = options.output_dir is None
        if options.output_dir is None:
            options = replace(options, output_dir=Path(tempfile.mkdtemp(prefix="agent-output-")))
        self.options = options
        self.engine = AgentEngine(
            self.options.cache_dir, self.options.epoch_interval_ms, self.options.compile_limits
        )
        self._host_factory = host_factory
        self._resolve = resolve
        self.on_instance_ended: list[InstanceEnded] = []
        self.workers: dict[str, AgentWorker] = {}
        for spec in specs:
            if spec.name in self.workers:
                raise ValueError(f"agent {spec.name} is configured twice")
            self.workers[spec.name] = self._new_worker(spec)
        self._output_guard = OutputGuard(lambda: [w.output for w in list(self.workers.values())])

    def start(self, suspended: Container[str] = ()) -> None:
        """Start every worker but the `suspended` ones; each loads its component on its own
        thread."""
        for name, worker in list(self.workers.items()):
            if name in suspended:
                worker.set_phase(STOPPED, OPERATOR_STOPPED)
            elif not worker.started:
                worker.start()
        self._output_guard.start()

    def stop(self, timeout: float = 15.0) -> None:
        """Stop all agents (in parallel, within one `timeout` for all), then free the engine.

        Blocking: run it in a thread. Compiles still running in their child processes are
        killed: an agent waiting for one stops at once.
        """
        workers = list(self.workers.values())
        for worker in workers:
            worker.request_stop()
        self.engine.compiler.close()
        deadline = time.monotonic() + timeout
        for worker in workers:
            if not worker.stop(max(0.0, deadline - time.monotonic())):
                log.error("agent %s did not stop within %.0f s", worker.spec.name, timeout)
        self._output_guard.stop()
        self.engine.close()
        gc.collect()  # free what is left of the stores now, not at interpreter exit
        if self._own_output_dir and self.options.output_dir is not None:
            shutil.rmtree(self.options.output_dir, ignore_errors=True)

    def _new_worker(self, spec: AgentSpec) -> AgentWorker:
        stopping = threading.Event()
        host, hooks = self._host_factory(spec, stopping)
        return AgentWorker(spec, self.engine, host, hooks, self.options, stopping, self._resolve)

    # ---- lifecycle changes on a running node (blocking: run them in a thread) ---------------

    def add(self, spec: AgentSpec, run: bool = True) -> AgentWorker:
        """Host a new agent; `run=False` keeps it stopped (status `stopped`) until `replace`."""
        if spec.name in self.workers:
            raise ValueError(f"agent {spec.name} is already hosted")
        worker = self.workers[spec.name] = self._new_worker(spec)
        if run:
            worker.start()
        return worker

    def replace(
        self, spec: AgentSpec, reason: str, drain_secs: float, run: bool = True
    ) -> AgentWorker:
        """Swap the agent's worker for a new one of `spec` (an upgrade, a rollback, a start):
        the old instance finishes its run in progress first (drain), then the new one starts.
        The agent's state and grants live in its journal, so the new instance finds them."""
        old = self.worker(spec.name)
        self._end(old, reason, drain_secs)
        worker = self.workers[spec.name] = self._new_worker(spec)
        if run:
            worker.start()
        else:
            worker.set_phase(STOPPED, OPERATOR_STOPPED)
        return worker

    def suspend(self, name: str, reason: str, drain_secs: float) -> AgentWorker:
        """Stop taking ticks, tasks and calls (tasks stay queued); the agent stays hosted."""
        return self.replace(self.worker(name).spec, reason, drain_secs, run=False)

    def remove(self, name: str, reason: str, drain_secs: float) -> None:
        self._end(self.worker(name), reason, drain_secs)
        del self.workers[name]

    def _end(self, worker: AgentWorker, reason: str, drain_secs: float) -> None:
        if worker.started:
            worker.hand_over_tasks = True
            if not worker.drain(drain_secs):
                log.error("agent %s did not stop; replacing it anyway", worker.spec.name)
        end = InstanceEnd(worker.spec.name, reason, tuple(worker.handed_over))
        for hook in self.on_instance_ended:
            try:
                hook(end)
            except Exception:
                log.exception("instance-ended hook failed for %s", worker.spec.name)

    def worker(self, name: str) -> AgentWorker:
        try:
            return self.workers[name]
        except KeyError:
            raise UnknownAgentError(name) from None

    def status(self, name: str | None = None) -> list[AgentStatus]:
        if name is not None:
            return [self.worker(name).status()]
        return [w.status() for w in self.workers.values()]

    def statuses(self) -> list[AgentStatus]:
        """Every agent's status (what the AG-UI snapshot reads)."""
        return self.status()

    def tick_now(self, name: str, detail: str) -> Future[None]:
        """An on-demand tick (an AG-UI run), judged like the tick loop's: an `err` is a fault."""
        return self.worker(name).submit("tick", detail, run_tick)

    def notify_task(self, name: str) -> None:
        """A task was assigned to `name`: deliver it now, not at the next tick."""
        self.worker(name).wake()

    async def list_tools(self, name: str) -> list[Tool]:
        future = self.worker(name).submit("list-tools", "", _list_tools)
        return await asyncio.wrap_future(future)

    async def call_tool(
        self, name: str, tool: str, arguments: str, listener: RunListener | None = None
    ) -> ToolResult:
        """Call an MCP tool; a tool's own failure is ToolResult(ok=False), a trap raises.
        `listener` hears what the agent logs and reports while the tool runs."""
        json.loads(arguments)  # JSON text is the contract; reject bad input before wasm runs
        future = self.worker(name).submit(
            "tool", tool, lambda inst: _call_tool(inst, tool, arguments), listener
        )
        return await asyncio.wrap_future(future)


def _list_tools(instance: AgentInstance) -> list[Tool]:
    if "list-tools" not in instance.funcs:
        return []
    return [
        Tool(t.name, t.description, getattr(t, "input-schema")) for t in instance.call("list-tools")
    ]


def _call_tool(instance: AgentInstance, tool: str, arguments: str) -> ToolResult:
    if "call-tool-content" in instance.funcs:  # world 0.3.0: the result as content items
        result = instance.call("call-tool-content", tool, arguments)
        return ToolResult(result.tag == "ok", result.payload, content=result.tag == "ok")
    if "call-tool" not in instance.funcs:
        return ToolResult(False, f"agent offers no tools (no `call-tool` export); asked {tool}")
    result = instance.call("call-tool", tool, arguments)
    return ToolResult(result.tag == "ok", result.payload)
