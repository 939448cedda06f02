"""The wasmtime settings of the node's engine, in a module of their own: the engine
(engine.py) and the compile child (compile_child.py) both build their Engine from them, so an
artifact the child compiles loads in the node, and neither has to import the other.

`AGENT_NODE_COMPILER` picks wasmtime's compiler: `cranelift` (the default: optimising, what a
node in production runs) or `winch` (wasmtime's baseline compiler: a Python-built component
compiles about 8 times faster and runs slower; for development nodes and the test suite,
docs/operations.md "Compilers"). The child inherits the variable from the node, so both
compile and load with the same one, and the artifact cache keeps their outputs apart.
"""

from __future__ import annotations

import os

import wasmtime
from wasmtime import _ffi

from node.runtime import memory

COMPILER_ENV = "AGENT_NODE_COMPILER"
# wasmtime's C API `wasmtime_strategy_t`; wasmtime-py's `Config.strategy` names only the
# first two, its C library has all three
_STRATEGIES = {"cranelift": 1, "winch": 2}
# Everything in engine_config() that changes compiled code; part of the artifact cache's key
# (Cranelift's stays what it was before Winch could be chosen: no node recompiles for it).
_SETTINGS = "fuel,epoch,host-memory,no-cow,v1"


def compiler() -> str:
    """The compiler `AGENT_NODE_COMPILER` names (unset or empty: cranelift)."""
    name = os.environ.get(COMPILER_ENV) or "cranelift"
    if name not in _STRATEGIES:
        raise ValueError(
            f"{COMPILER_ENV}={name!r}: not a compiler this node knows "
            f"(one of {', '.join(_STRATEGIES)})"
        )
    return name


def settings() -> str:
    """The cache key's part for these settings."""
    name = compiler()
    return _SETTINGS if name == "cranelift" else f"{_SETTINGS},{name}"


def engine_config() -> wasmtime.Config:
    """The node's engine settings; the compile child uses the same, so artifacts match."""
    config = wasmtime.Config()
    config.consume_fuel = True
    config.epoch_interruption = True
    name = compiler()
    if name != "cranelift":  # wasmtime's own default is Cranelift
        _ffi.wasmtime_config_strategy_set(config.ptr(), _STRATEGIES[name])
    memory.install(config)
    return config
