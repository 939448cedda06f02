"""The wasmtime settings of the node's engine, in a module of their own: the engine
(engine.py) and the compile child (compile_child.py) both build their Engine from them, so an
artifact the child compiles loads in the node, and neither has to import the other."""

from __future__ import annotations

import wasmtime

from node.runtime import memory

# Everything in engine_config() that changes compiled code; part of the artifact cache's key.
SETTINGS = "fuel,epoch,host-memory,no-cow,v1"


def engine_config() -> wasmtime.Config:
    """The node's engine settings; the compile child uses the same, so artifacts match."""
    config = wasmtime.Config()
    config.consume_fuel = True
    config.epoch_interruption = True
    memory.install(config)
    return config
