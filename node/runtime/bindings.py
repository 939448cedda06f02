"""Binds an `AgentHost` to the WIT imports of `agent-runtime:agent/host`, in every version of
the world the node hosts (0.1.0 and 0.2.0 have the same functions; node/runtime/witversion.py).

Each import is wrapped so that: a `HostError` becomes the WIT `host-error` case; the run's
epoch deadline is re-armed from its one wall-clock budget when the call returns (host calls
do not refill it; time blocked on an operator's approval is excluded, see RunClock); and no
Python exception ever unwinds into wasmtime-py, whose exception
hand-off is a process-wide global and so not safe with one thread per agent. A host failure
in a call that has no error channel (log, state-set, ...) traps the agent instead of being
swallowed, so lost journal writes are never silent. A call that parks its run (RunParked)
traps it too: the run ends there and is resumed later (node/runtime/parking.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import wasmtime
from wasmtime import _ffi as ffi
from wasmtime import component as cm

from node.runtime.hostapi import AgentHost, HostError, RunParked, run_clock
from node.runtime.witversion import PACKAGE, VERSIONS

log = logging.getLogger(__name__)

HOST_INTERFACES = tuple(f"{PACKAGE}host@{version}" for version in VERSIONS)

_RESULT_FUNCS = {
    "invoke": "invoke",
    "get-secret": "get_secret",
    "infer": "infer",
    "create-task": "create_task",
}
_PLAIN_FUNCS = {
    "log": "log",
    "report-finding": "report_finding",
    "task-progress": "task_progress",
    "state-get": "state_get",
    "state-set": "state_set",
}


def _rearm(ctx: Any, interval_ms: int) -> None:
    """Deadline = what is left of the run's budget (0 when spent: the next check traps)."""
    remaining = run_clock().remaining_ms()
    ticks = max(0, -(-int(remaining) // interval_ms)) if remaining > 0 else 0
    ffi.wasmtime_context_set_epoch_deadline(ctx._context(), ticks)


def _result_func(name: str, fn: Callable[..., str], interval_ms: int) -> Callable[..., Any]:
    """`result<string, host-error>`: ok is a plain str, err a Variant of host-error."""

    def call(ctx: Any, *args: Any) -> Any:
        try:
            value = fn(*args)
            if not isinstance(value, str):
                raise TypeError(f"{name} returned {type(value).__name__}, not str")
            return value
        except HostError as e:
            return cm.Variant(e.kind, e.message)
        except RunParked as e:  # cut the run here: a trap the worker knows is no fault
            raise wasmtime.WasmtimeError(f"the run is parked: {e}") from None
        except Exception as e:
            log.exception("host call %s failed", name)
            return cm.Variant("failed", f"host error in {name}: {type(e).__name__}")
        finally:
            _rearm(ctx, interval_ms)

    return call


def _plain_func(name: str, fn: Callable[..., Any], interval_ms: int) -> Callable[..., Any]:
    def call(ctx: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as e:
            log.exception("host call %s failed", name)
            raise wasmtime.WasmtimeError(f"host call {name} failed: {e}") from None
        finally:
            _rearm(ctx, interval_ms)

    return call


def make_linker(engine: wasmtime.Engine, host: AgentHost, interval_ms: int) -> cm.Linker:
    """A linker with WASI p2 (the Store's WasiConfig grants nothing) and `host` bound;
    `interval_ms` is the engine's epoch interval."""
    linker = cm.Linker(engine)
    linker.add_wasip2()
    with linker.root() as root:
        for interface in HOST_INTERFACES:
            with root.add_instance(interface) as iface:
                for wit_name, attr in _RESULT_FUNCS.items():
                    func = _result_func(wit_name, getattr(host, attr), interval_ms)
                    iface.add_func(wit_name, func)
                for wit_name, attr in _PLAIN_FUNCS.items():
                    iface.add_func(
                        wit_name, _plain_func(wit_name, getattr(host, attr), interval_ms)
                    )
    return linker
