"""One Store and component instance of an agent, used only on the agent's worker thread.

Every entry into wasm gets a fresh fuel budget (`fuel_per_tick`) and epoch deadline
(`tick_timeout_ms`); a trap, exhausted fuel or a passed deadline is turned into an
`AgentFault` with a readable reason. After a fault the instance is unusable (wasmtime
refuses to re-enter it) and the worker replaces it.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import re
import weakref
from typing import Any

import wasmtime
from wasmtime import _ffi as ffi
from wasmtime import component as cm

from node.runtime.agenterror import own_error
from node.runtime.calls import ExportCall
from node.runtime.engine import AgentEngine
from node.runtime.hostapi import AgentFault, FaultKind, run_clock
from node.runtime.memory import MemoryMeter, metering
from node.runtime.output import OutputCapture
from node.runtime.spec import AgentSpec
from node.runtime.witversion import task_fields, world_version

UNLIMITED_FUEL = 1 << 62
EXPORTS = ("tick", "handle-task", "list-tools", "call-tool")
# the world's optional MCP exports (wit/0.3.0/agent.wit, node/runtime/mcp_exports.py)
MCP_EXPORTS = (
    "list-prompts",
    "get-prompt",
    "complete-argument",
    "list-resources",
    "list-resource-templates",
    "read-resource",
    "call-tool-content",
)


# Stores still open when the interpreter exits would be freed during finalization, when
# wasmtime can no longer call back into Python (the memory creator): that aborts the process.
_live: weakref.WeakSet[AgentInstance] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for instance in list(_live):
        instance.close()


class AgentFaultError(Exception):
    def __init__(self, fault: AgentFault) -> None:
        super().__init__(fault.reason)
        self.fault = fault


class MissingExportError(Exception):
    """The component does not export this function (a tiny test agent, say)."""


class AgentInstance:
    def __init__(
        self,
        engine: AgentEngine,
        component: cm.Component,
        linker: cm.Linker,
        spec: AgentSpec,
        meter: MemoryMeter,
        output: OutputCapture,
    ) -> None:
        self.spec = spec
        self.meter = meter
        self.output = output
        self.budget = spec.fuel_per_tick or UNLIMITED_FUEL
        self.deadline_ticks = engine.deadline_ticks(spec.tick_timeout_ms)
        self.fuel_used = 0
        self.store = wasmtime.Store(engine.engine)
        _live.add(self)
        wasi = wasmtime.WasiConfig()  # no args, env, preopened dirs; sockets denied
        output.attach(wasi)
        self.store.set_wasi(wasi)
        if spec.memory_limit_mb:
            self.store.set_limits(memory_size=spec.memory_limit_mb << 20)
        # the store's context and a fuel cell, for the calls every run makes (set and read
        # fuel, set the deadline) without Store's wrappers; valid until `close`
        self._context = self.store._context()
        self._fuel = ctypes.c_uint64()
        self._fuel_ref = ctypes.byref(self._fuel)
        self._arm()
        try:
            with metering(meter):
                self.instance = linker.instantiate(self.store, component)
            self.funcs: dict[str, ExportCall] = {}
            for name in (*EXPORTS, *MCP_EXPORTS):
                func = self.instance.get_func(self.store, name)
                if func is not None:
                    self.funcs[name] = ExportCall(func, self.store)
        except wasmtime.WasmtimeError as e:
            self.close()
            raise AgentFaultError(self.classify(e, "load")) from None
        self.fuel_remaining = self._read_fuel()
        # the world version it was built against, and the task record it takes (witversion.py)
        self.wit_version = world_version(component, engine.engine)
        self.task_fields = task_fields(component, engine.engine)
        if "tick" not in self.funcs:
            self.close()
            raise AgentFaultError(AgentFault("load", "component does not export `tick`"))

    def _arm(self) -> None:
        """A fresh fuel budget and one wall-clock budget for the run (host calls re-arm the
        deadline from what is left of it, see RunClock)."""
        error = ffi.wasmtime_context_set_fuel(self._context, self.budget)
        if error:
            raise wasmtime.WasmtimeError._from_ptr(error)
        run_clock().start(self.spec.tick_timeout_ms)
        ffi.wasmtime_context_set_epoch_deadline(self._context, self.deadline_ticks)

    def _read_fuel(self) -> int:
        error = ffi.wasmtime_context_get_fuel(self._context, self._fuel_ref)
        if error:
            raise wasmtime.WasmtimeError._from_ptr(error)
        return self._fuel.value

    def call(self, export: str, *args: Any) -> Any:
        """Call an export with a fresh fuel budget and deadline; faults raise AgentFaultError."""
        func = self.funcs.get(export)
        if func is None:
            raise MissingExportError(f"component does not export `{export}`")
        self._arm()
        try:
            return func(self.store, *args)
        except wasmtime.WasmtimeError as e:
            raise AgentFaultError(self.classify(e, "trap")) from None
        except (TypeError, ValueError) as e:  # the export's type does not match the WIT
            raise AgentFaultError(AgentFault("trap", f"bad `{export}` export: {e}")) from None
        finally:
            self.fuel_remaining = self._read_fuel()
            self.fuel_used = self.budget - self.fuel_remaining

    def classify(self, error: wasmtime.WasmtimeError, default: FaultKind) -> AgentFault:
        """Name the cause of a wasmtime error: fuel, deadline, memory limit, or a trap."""
        text = str(error)
        cause = _cause(text)
        self.output.collect()  # a Python agent's traceback is on stderr
        tail = list(self.output.stderr_tail)
        stderr = " | ".join(tail)
        limit = (self.spec.memory_limit_mb or 0) << 20
        heap = self.meter.heap_bytes()
        kind: FaultKind = default
        if "all fuel consumed" in text:
            kind, reason = "fuel", f"fuel exhausted: used all {self.budget} units of the run"
        elif "wasm trap: interrupt" in text:
            kind = "deadline"
            reason = f"deadline exceeded: ran longer than {self.spec.tick_timeout_ms} ms"
        elif limit and (heap + (1 << 20) >= limit or "MemoryError" in stderr):
            kind = "memory"
            reason = (
                f"memory limit of {self.spec.memory_limit_mb} MiB reached "
                f"(heap {heap} bytes): {cause}"
            )
        elif cause.startswith("host call"):
            kind, reason = "host", cause
        else:
            reason = f"{'load failed' if default == 'load' else 'trap'}: {cause}"
        if stderr:
            reason += f" [stderr: {stderr[-500:]}]"
        own = own_error(tail) if kind in ("trap", "load", "memory") else None
        if own is not None:  # what the agent raised first, then how its runtime ended
            reason = f"{own}; {reason}"
        return AgentFault(kind, reason)

    def close(self) -> None:
        """Free the store (and with it the linear memories) now, not at garbage collection."""
        self.funcs = {}
        with contextlib.suppress(AttributeError):
            del self.instance
        self.store.close()
        self.output.detach()


def _cause(text: str) -> str:
    """The "Caused by:" chain of a wasmtime error on one line, without the backtrace."""
    if "Caused by:" not in text:
        return text.strip().splitlines()[0] if text.strip() else "unknown error"
    lines = text.split("Caused by:", 1)[1].strip().splitlines()
    causes = [re.sub(r"^\d+:\s*", "", ln.strip()) for ln in lines if ln.strip()]
    return "; ".join(causes)
