"""The one wasmtime Engine of the node: fuel, epoch interruption, compiled-component cache.

Compiling a Python-built component takes seconds; deserializing the compiled artifact
(mmapped by `Component.deserialize_file`) takes milliseconds, so compiled components are kept
on disk keyed by the wasm's sha256, the wasmtime version and the engine settings. An
artifact that does not load (corrupt, other settings) is recompiled and replaced.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import wasmtime
from wasmtime import component as cm

from node.files import write_atomically
from node.runtime import memory

log = logging.getLogger(__name__)

WASMTIME_VERSION = version("wasmtime")
# Everything in _config() that changes compiled code; part of the cache key.
_SETTINGS = "fuel,epoch,host-memory,no-cow,v1"


@dataclass(frozen=True)
class LoadedComponent:
    component: cm.Component
    sha256: str
    cache_hit: bool  # True: deserialized from the disk cache, not compiled
    seconds: float


def _config() -> wasmtime.Config:
    config = wasmtime.Config()
    config.consume_fuel = True
    config.epoch_interruption = True
    memory.install(config)
    return config


class AgentEngine:
    """Owns the Engine, the epoch ticker thread and the compiled-component cache."""

    def __init__(self, cache_dir: Path | None = None, epoch_interval_ms: int = 10) -> None:
        self.engine = wasmtime.Engine(_config())
        self.cache_dir = cache_dir
        self.epoch_interval_ms = epoch_interval_ms
        self.compiles = 0  # how many times this engine compiled (cache misses), for tests
        self._components: dict[str, cm.Component] = {}
        self._key_locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick_epochs, name="wasm-epoch", daemon=True)
        self._ticker.start()

    def deadline_ticks(self, timeout_ms: int) -> int:
        """Epoch ticks for a wasm time budget of `timeout_ms` (at least one tick)."""
        return max(1, -(-timeout_ms // self.epoch_interval_ms))

    def _tick_epochs(self) -> None:
        interval = self.epoch_interval_ms / 1000
        while not self._stop.wait(interval):
            self.engine.increment_epoch()

    def load(self, path: Path) -> LoadedComponent:
        """Load a component from `path`: memory, else disk cache, else compile. Blocking."""
        start = time.perf_counter()
        wasm = path.read_bytes()
        sha = hashlib.sha256(wasm).hexdigest()
        with self._lock:
            key_lock = self._key_locks.setdefault(sha, threading.Lock())
        with key_lock:  # two agents with one component compile it once
            if sha in self._components:
                return LoadedComponent(
                    self._components[sha], sha, True, time.perf_counter() - start
                )
            component = self._from_cache(sha)
            hit = component is not None
            if component is None:
                component = cm.Component(self.engine, wasm)
                self.compiles += 1
                self._to_cache(sha, component)
            self._components[sha] = component
        return LoadedComponent(component, sha, hit, time.perf_counter() - start)

    def _cache_path(self, sha: str) -> Path | None:
        if self.cache_dir is None:
            return None
        tag = hashlib.sha256(_SETTINGS.encode()).hexdigest()[:8]
        return self.cache_dir / f"{sha}-wasmtime{WASMTIME_VERSION}-{tag}.cwasm"

    def _from_cache(self, sha: str) -> cm.Component | None:
        path = self._cache_path(sha)
        if path is None or not path.exists():
            return None
        try:
            return cm.Component.deserialize_file(self.engine, str(path))
        except wasmtime.WasmtimeError as e:
            log.warning("discarding unusable compiled component %s: %s", path.name, e)
            path.unlink(missing_ok=True)
            return None

    def _to_cache(self, sha: str, component: cm.Component) -> None:
        path = self._cache_path(sha)
        if path is None:
            return
        try:
            write_atomically(path, bytes(component.serialize()), mode=0o644, durable=False)
        except OSError as e:  # a read-only cache slows restarts but breaks nothing
            log.warning("cannot write compiled component cache %s: %s", path, e)

    def close(self) -> None:
        self._stop.set()
        self._ticker.join(timeout=1)
        self._components.clear()
