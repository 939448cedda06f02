"""One agent's worker thread: loads it, ticks it, serves its tasks and MCP calls, restarts it.

Everything that touches the agent's Store happens on this thread, so a host call that
blocks (an approval wait) holds up this agent only, and wasm never runs on the asyncio loop.
Other threads talk to the worker through a queue: `submit` for MCP calls, `wake` for new
tasks, `stop`. A fault (trap, err, fuel, deadline, memory) puts the agent in `error`; it is
restarted with exponential backoff, its store and memory freed in between. A task's run
that would wait for people is parked instead (node/runtime/parking.py): it ends at that call,
the instance is replaced at once (no fault, no backoff) and the agent's other work goes on.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import wasmtime
from wasmtime import component as cm

from node.ops.ids import new_id
from node.runtime.bindings import make_linker
from node.runtime.compiler import CompileError
from node.runtime.engine import AgentEngine
from node.runtime.hostapi import (
    AgentFault,
    AgentHooks,
    AgentHost,
    Run,
    RunClock,
    RunKind,
    RunListener,
    RunParked,
    RunResult,
    Task,
    run_clock,
)
from node.runtime.instance import AgentFaultError, AgentInstance, MissingExportError
from node.runtime.memory import MemoryMeter
from node.runtime.output import OutputCapture
from node.runtime.spec import REGISTRY_PREFIX, AgentSpec, RuntimeOptions
from node.runtime.status import AgentStatus, State
from node.runtime.witversion import task_record

log = logging.getLogger(__name__)


class AgentUnavailableError(Exception):
    """The agent cannot take a call now (stopped, or in error awaiting restart)."""


@dataclass
class _Call:
    kind: RunKind
    detail: str
    fn: Callable[[AgentInstance], Any]
    future: Future[Any] = field(default_factory=Future)
    listener: RunListener | None = None


_WAKE = object()
DRAIN_POLL_SECS = 0.05  # how often a drain looks whether the run only waits for a person
# What an agent without a live instance is doing (its status's `phase`; docs/operations.md)
NOT_STARTED = "not started"
STARTING = "starting"  # loading its component; the engine refines it (engine.LoadPhase)
RESTARTING = "restarting"  # in error, waiting out the backoff
DRAINING = "draining"  # a lifecycle change: finishing its run in progress, then ending
STOPPED = "stopped"
# "registry:ID@VERSION" → the package's component file; LookupError when unknown.
Resolver = Callable[[str], Path]


def run_tick(instance: AgentInstance) -> None:
    err = instance.call("tick")
    if err is not None:  # tick returned err(string): a fault like a trap, per the design
        raise AgentFaultError(AgentFault("err", f"tick returned err: {err}"))


@dataclass(eq=False)
class AgentWorker:
    spec: AgentSpec
    engine: AgentEngine
    host: AgentHost
    hooks: AgentHooks
    options: RuntimeOptions
    stopping: threading.Event = field(default_factory=threading.Event)
    resolve: Resolver | None = None

    def __post_init__(self) -> None:
        spec, options = self.spec, self.options
        self.meter = MemoryMeter()
        assert options.output_dir is not None, "AgentRuntime gives each worker an output_dir"
        self.output = OutputCapture(
            options.output_dir,
            spec.name,
            options.max_output_line,
            options.max_output_lines_per_run,
            options.max_output_bytes_per_run,
        )
        self.load_seconds: float | None = None  # time of the last component load
        self.load_cache_hit: bool | None = None
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._instance: AgentInstance | None = None
        self._linker: cm.Linker | None = None
        # "stopped" until an instance runs: compiling is not working (issue 37 item 8)
        self._state: State = "stopped"
        self._phase: str | None = NOT_STARTED
        self._reason: str | None = "its worker has not started yet"
        self._started_at = time.monotonic()
        self._last_activity = self._started_at
        self._restart_count = 0
        self._faults = 0  # every fault of this worker (probation counts them)
        self._good_runs = 0
        self._failures = 0  # consecutive faults, for the backoff
        self._retry_at = 0.0
        self._last_error: str | None = None
        self._fuel_remaining: int | None = spec.fuel_per_tick
        self._fuel_consumed = 0
        self._runs = 0
        self._next_tick = 0.0
        # Set by `drain`: finish the run in progress, take nothing new, end. Unlike `stopping`,
        # a host call in flight (an approval wait) is not given up.
        self._draining = False
        # Set before a lifecycle swap: a task interrupted by the stop is left open for the next
        # instance (handed over) instead of being journaled as failed.
        self.hand_over_tasks = False
        # The outcome of this worker's first instance: None once a run of it succeeded or waits
        # for an operator's approval (it loaded and works), else why not (load failure, a fault
        # first, stopped first). An upgrade waits on it.
        self.probation: Future[str | None] = Future()
        self._on_probation = True  # until `probation` is set (read every run: no lock)
        self.handed_over: list[str] = []  # ids of tasks left open for the next instance
        # tasks whose run was parked and not yet resumed, in the order parked (under _lock)
        self._parked: dict[str, None] = {}
        self._replacing = False  # the next instance replaces one a parked run ended
        self._clock: RunClock | None = None  # the worker thread's run clock, once it runs
        self._run: tuple[Run, float] | None = None  # the run in progress and its start
        self._thread = threading.Thread(target=self._main, name=f"agent-{spec.name}", daemon=True)

    # ---- other threads -------------------------------------------------------------------

    def start(self) -> None:
        self.set_phase(STARTING, "its worker started; loading its component")
        self._thread.start()

    def set_phase(self, phase: str | None, reason: str | None = None) -> None:
        """What the agent does while it has no live instance (None once it has one)."""
        with self._lock:
            self._phase, self._reason = phase, reason

    def stop(self, timeout: float | None = None) -> bool:
        """Ask the worker to stop; True once its thread has ended (within `timeout`)."""
        self.request_stop()
        if not self.started:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def request_stop(self) -> None:
        self.stopping.set()
        self._queue.put(_WAKE)

    def drain(self, timeout: float) -> bool:
        """End after the run in progress (a task finishes on this instance); past `timeout`,
        stop hard (a blocked host call gives up; with `hand_over_tasks` its task stays open).
        A run that waits for an operator's approval is no work to finish: it is stopped at
        once (its task handed over, the request closed by the lifecycle's hook). True once
        the thread has ended. Blocking."""
        if not self.started:
            return True
        self._draining = True
        self.set_phase(DRAINING, "finishing its run in progress, then ending")
        self._queue.put(_WAKE)
        deadline = time.monotonic() + timeout
        while self._thread.is_alive() and (left := deadline - time.monotonic()) > 0:
            clock = self._clock
            if clock is not None and clock.waiting:
                log.info("agent %s: its run waits for an approval; ending it now", self.spec.name)
                return self.stop(timeout)
            self._thread.join(min(left, DRAIN_POLL_SECS))
        if self._thread.is_alive():
            log.warning(
                "agent %s: still busy after %.0f s of draining; stopping", self.spec.name, timeout
            )
            return self.stop(timeout)
        return True

    @property
    def started(self) -> bool:
        return self._thread.ident is not None

    @property
    def _ending(self) -> bool:
        return self._draining or self.stopping.is_set()

    def wake(self) -> None:
        """Look for new tasks now rather than at the next tick."""
        self._queue.put(_WAKE)

    def submit(
        self,
        kind: RunKind,
        detail: str,
        fn: Callable[[AgentInstance], Any],
        listener: RunListener | None = None,
    ) -> Future[Any]:
        """Run `fn` with the agent's instance on the worker thread (an MCP call, say);
        `listener` hears what the agent logs and reports during that run."""
        call = _Call(kind, detail, fn, listener=listener)
        if self.stopping.is_set() or not self.started:  # not started: stopped by an operator
            call.future.set_exception(AgentUnavailableError(f"agent {self.spec.name} stopped"))
        else:
            self._queue.put(call)
        return call.future

    def status(self) -> AgentStatus:
        now = time.monotonic()
        with self._lock:
            state = self._state if self.started else "stopped"
            return AgentStatus(
                name=self.spec.name,
                status=state,
                uptime_ms=0 if self._instance is None else int((now - self._started_at) * 1000),
                last_activity_ms_ago=(
                    0 if state == "running" else int((now - self._last_activity) * 1000)
                ),
                restart_count=self._restart_count,
                heap_bytes=self.meter.heap_bytes() if self._instance is not None else 0,
                fuel_remaining=self._fuel_remaining if self.spec.fuel_per_tick else None,
                last_error=self._last_error,
                fuel_consumed=self._fuel_consumed,
                runs=self._runs,
                phase=self._phase,
                reason=self._reason,
                faults=self._faults,
                good_runs=self._good_runs,
                parked_tasks=tuple(self._parked),
            )

    # ---- the worker thread ---------------------------------------------------------------

    def busy_with(self) -> str | None:
        """The run in progress, as an operator reads it ("task 7f3a… for 12 s, waiting for an
        approval"), or None between runs."""
        current, clock = self._run, self._clock
        if current is None:
            return None
        run, started = current
        what = f"{run.kind} {run.detail}".strip()
        text = f"{what} for {time.monotonic() - started:.0f} s"
        return text + ", waiting for an approval" if clock and clock.waiting else text

    def _main(self) -> None:
        self._clock = run_clock()
        self._clock.on_wait = lambda: self._end_probation(None)
        try:
            while not self._ending:
                if self._instance is None:
                    self._wait_for_retry()
                    if self._ending or not self._start_instance():
                        continue
                self._serve_once()
        except Exception as e:  # a bug here must not take the node down silently
            log.exception("agent %s worker crashed", self.spec.name)
            self._last_error = f"worker crashed: {e!r}"
        finally:
            self._shutdown()

    def _wait_for_retry(self) -> None:
        """Sit out the backoff after a fault; calls arriving meanwhile are refused."""
        while not self._ending and (left := self._retry_at - time.monotonic()) > 0:
            try:
                item = self._queue.get(timeout=left)
            except queue.Empty:
                return
            if isinstance(item, _Call):
                item.future.set_exception(
                    AgentUnavailableError(
                        f"agent {self.spec.name} is in error ({self._last_error}); "
                        f"restarting in {int(left * 1000)} ms"
                    )
                )

    def _start_instance(self) -> bool:
        restarting = self._failures > 0 and not self._replacing  # a park is no restart
        if restarting:
            self.set_phase(RESTARTING, f"loading its component again after: {self._last_error}")
        try:
            loaded = self.engine.load(self._component_path(), self._loading)
            self.load_seconds, self.load_cache_hit = loaded.seconds, loaded.cache_hit
            if self._linker is None:
                interval = self.engine.epoch_interval_ms
                self._linker = make_linker(self.engine.engine, self.host, interval)
            instance = AgentInstance(
                self.engine, loaded.component, self._linker, self.spec, self.meter, self.output
            )
        except AgentFaultError as e:
            self._fail(e.fault)
            return False
        except CompileError as e:
            if e.failure != "cancelled":  # cancelled: the node is stopping, not a fault
                self._fail(AgentFault("load", f"cannot compile {self.spec.component}: {e}"))
            return False
        except (OSError, LookupError, wasmtime.WasmtimeError) as e:
            self._fail(AgentFault("load", f"cannot load {self.spec.component}: {e}"))
            return False
        now = time.monotonic()
        with self._lock:
            self._instance = instance
            self._state = "idle"  # with the instance: status never shows one without the other
            self._phase = self._reason = None
            self._started_at = self._last_activity = now
            self._fuel_remaining = instance.fuel_remaining
            if restarting:
                self._restart_count += 1
        self._emit_output()
        if self._replacing:  # the same agent going on after a parked run: no new life
            self._replacing = False
        else:
            self._next_tick = now  # first tick right away
            self.hooks.agent_started(self._restart_count)
        self._set_state("idle", force=True)
        return True

    def _loading(self, phase: str, reason: str) -> None:
        """The engine's report of where a load is: waiting for a compile slot, compiling."""
        if not self._ending:
            self.set_phase(phase, f"{reason} ({self.spec.component})")

    def _set_state(self, state: State, force: bool = False) -> None:
        with self._lock:
            changed = force or state != self._state
            self._state = state
        if changed:
            self.hooks.status_changed(state)

    def _component_path(self) -> Path:
        """The component file; a registry reference is resolved at every (re)start."""
        component = self.spec.component
        if isinstance(component, Path):
            return component
        if not component.startswith(REGISTRY_PREFIX):
            return Path(component)
        if self.resolve is None:
            raise LookupError("no package registry on this node")
        return self.resolve(component)

    def _serve_once(self) -> None:
        """Run waiting calls, then tasks, then the tick if due; else wait for one of them."""
        # only this thread takes from the queue: empty() is exact here, and cheaper than
        # get_nowait's exception on every tick
        while self._instance is not None and not self._queue.empty():
            item = self._queue.get_nowait()
            if isinstance(item, _Call):
                self._run_call(item)
        while self._instance is not None and not self._ending:
            task = self.hooks.next_task()
            if task is None:
                break
            self._run_task(task)
        if self._instance is None or self._ending:
            return
        wait = self._next_tick - time.monotonic()
        if wait <= 0:
            self._run_tick()
            self._next_tick = time.monotonic() + self.spec.tick_interval_ms / 1000
            return
        try:
            item = self._queue.get(timeout=wait)
        except queue.Empty:
            return
        if isinstance(item, _Call):
            self._run_call(item)

    def _run_tick(self) -> None:
        try:
            self._execute("tick", "", run_tick)
        except AgentFaultError:
            return
        self._failures = 0  # healthy again: the next fault starts the backoff afresh

    def _end_probation(self, reason: str | None) -> None:
        # only the worker thread sets it; the flag spares every run the Future's lock
        if self._on_probation:
            self._on_probation = False
            if not self.probation.done():
                self.probation.set_result(reason)

    def _handed_over(self, task: Task, why: str) -> bool:
        """Whether a task run was cut by a lifecycle's hard stop (its drain timed out): then
        the task stays open for the next instance (the queue releases it), delivered again as
        after a restart, rather than finished with what a cut run answered."""
        if not (self.hand_over_tasks and self.stopping.is_set()):
            return False
        self.handed_over.append(task.id)
        log.info(
            "agent %s: task %s handed over to the next instance (%s)", self.spec.name, task.id, why
        )
        return True

    def _run_task(self, task: Task) -> None:
        with self._lock:
            self._parked.pop(task.id, None)
        self.hooks.task_started(task)

        def handle(inst: AgentInstance) -> Any:  # the record of the world it was built for
            return inst.call("handle-task", task_record(task, inst.task_fields))

        try:
            result = self._execute("task", task.id, handle)
        except RunParked:  # it waits for people; its verdict releases it to the queue again
            with self._lock:
                self._parked[task.id] = None
            return
        except MissingExportError as e:
            self.hooks.task_failed(task, str(e))
            return
        except AgentFaultError as e:
            if not self._handed_over(task, e.fault.reason):
                self.hooks.task_failed(task, f"agent failed: {e.fault.reason}")
            return
        if self._handed_over(task, "its run was cut by the stop"):
            return  # whatever it answered, a host call of it may have been refused
        if result.tag == "ok":
            self.hooks.task_completed(task, result.payload)
        else:
            self.hooks.task_failed(task, result.payload)

    def _run_call(self, call: _Call) -> None:
        if not call.future.set_running_or_notify_cancel():
            return
        try:
            call.future.set_result(self._execute(call.kind, call.detail, call.fn, call.listener))
        except BaseException as e:
            call.future.set_exception(e)

    def _execute(
        self,
        kind: RunKind,
        detail: str,
        fn: Callable[[AgentInstance], Any],
        listener: RunListener | None = None,
    ) -> Any:
        """One entry into wasm, framed by run hooks; a fault fails the agent and re-raises."""
        instance = self._instance
        assert instance is not None
        run = Run(self.spec.name, new_id(), kind, detail, listener)
        self._set_state("running")
        self.hooks.run_started(run)
        start = time.monotonic()
        self._run = (run, start)
        fault: AgentFault | None = None
        parked = False
        instance.fuel_used = 0
        try:
            return fn(instance)
        except AgentFaultError as e:
            clock = self._clock
            if clock is not None and clock.parked:  # the host cut it: no fault of the agent
                parked = True
                raise RunParked(f"{kind} {detail}") from None
            fault = e.fault
            raise
        finally:
            end = time.monotonic()
            self._run = None
            with self._lock:  # one acquisition for the run's figures and the idle state
                self._last_activity = end
                self._fuel_remaining = instance.fuel_remaining
                self._fuel_consumed += instance.fuel_used
                self._runs += 1
                self._good_runs += fault is None
                idle = fault is None and self._state != "idle"
                if idle:
                    self._state = "idle"
            if idle:
                self.hooks.status_changed("idle")
            if fault is None and self._on_probation:
                self._end_probation(None)
            self._emit_output()
            self.hooks.run_finished(
                run,
                RunResult(
                    int((end - start) * 1000), instance.fuel_used, fault.reason if fault else None
                ),
            )
            if fault is not None:
                self._fail(fault)
            elif parked:  # a trapped instance cannot be entered again: a fresh one goes on
                self._close_instance()
                self._replacing = True

    def _fail(self, fault: AgentFault) -> None:
        fault = AgentFault(fault.kind, self.hooks.redact(fault.reason))  # stderr may hold one
        self._replacing = False  # a restart after this: the next instance is a new life
        self._failures += 1
        delay_ms = min(
            self.options.restart_backoff_ms * 2 ** (self._failures - 1),
            self.options.restart_backoff_max_ms,
        )
        self._close_instance()
        self._emit_output()
        with self._lock:  # with the count: a reader of `faults` finds this error
            self._last_error = fault.reason
            self._faults += 1
            self._phase = RESTARTING
            self._reason = f"restart in {delay_ms} ms after: {fault.reason}"
        self._set_state("error")
        self._end_probation(fault.reason)
        self._retry_at = time.monotonic() + delay_ms / 1000
        log.warning("agent %s: %s; restart in %d ms", self.spec.name, fault.reason, delay_ms)
        self.hooks.agent_errored(fault, delay_ms)

    def _emit_output(self) -> None:
        self.output.collect()
        lines = self.output.drain()
        if lines:
            output = self.hooks.output
            for stream, line in lines:
                output(stream, line)

    def _close_instance(self) -> None:
        if self._instance is not None:
            self._instance.close()
            self._instance = None

    def _shutdown(self) -> None:
        if self.hand_over_tasks:  # parked runs resume on the next instance
            self.handed_over.extend(t for t in self._parked if t not in self.handed_over)
        self._close_instance()
        self._linker = None
        self._emit_output()
        self.set_phase(STOPPED, self._last_error if self._state == "error" else "stopped")
        self._set_state("stopped")
        self._end_probation(self._last_error or "the agent stopped before its first tick")
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, _Call):
                item.future.set_exception(AgentUnavailableError(f"agent {self.spec.name} stopped"))
        self.hooks.agent_stopped()
