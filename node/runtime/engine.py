"""The one wasmtime Engine of the node: fuel, epoch interruption, compiled-component cache.

Compiling a Python-built component takes seconds; deserializing the compiled artifact
(mmapped by `Component.deserialize_file`) takes milliseconds, so compiled components are kept
on disk keyed by the wasm's sha256, the wasmtime version and the engine settings. An
artifact that does not load (corrupt, other settings) is recompiled and replaced.

The node never compiles in its own process: a compile runs in a child (node.runtime.compiler)
that writes the serialized artifact; the node validates it by deserializing it and only then
renames it into the cache. That keeps Cranelift's peak heap out of the node for good.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import wasmtime
from wasmtime import component as cm

from node.runtime.compiled_cache import artifact_path
from node.runtime.compiler import CompileError, CompileLimits, Compiler
from node.runtime.engine_settings import engine_config

log = logging.getLogger(__name__)

_PARTIAL = ".compiling-"  # artifacts being written by a compile child
_PARTIAL_STALE_SECS = 24 * 3600  # older ones were left by a killed node (others may be live)


# Told where a load is, (phase, why): "waiting to compile" (a compile slot or another agent's
# compile of the same component), "compiling". An agent's status shows it (worker.py).
LoadPhase = Callable[[str, str], None]
WAITING_TO_COMPILE = "waiting to compile"
COMPILING = "compiling"


@dataclass(frozen=True)
class LoadedComponent:
    component: cm.Component
    sha256: str
    cache_hit: bool  # True: deserialized from the disk cache, not compiled
    seconds: float


class AgentEngine:
    """Owns the Engine, the epoch ticker thread and the compiled-component cache."""

    def __init__(
        self,
        cache_dir: Path | None = None,
        epoch_interval_ms: int = 10,
        compile_limits: CompileLimits | None = None,
    ) -> None:
        self.engine = wasmtime.Engine(engine_config())
        self.cache_dir = cache_dir
        self.epoch_interval_ms = epoch_interval_ms
        self.compiler = Compiler(compile_limits)
        self.compiles = 0  # how many times this engine compiled (cache misses), for tests
        self._components: dict[str, cm.Component] = {}
        self._rejected: dict[str, CompileError] = {}  # wasmtime refused: same answer next time
        self._key_locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick_epochs, name="wasm-epoch", daemon=True)
        self._ticker.start()
        self.remove_stale_partials()

    def deadline_ticks(self, timeout_ms: int) -> int:
        """Epoch ticks for a wasm time budget of `timeout_ms` (at least one tick)."""
        return max(1, -(-timeout_ms // self.epoch_interval_ms))

    def _tick_epochs(self) -> None:
        interval = self.epoch_interval_ms / 1000
        while not self._stop.wait(interval):
            self.engine.increment_epoch()

    def load(self, path: Path, on_phase: LoadPhase | None = None) -> LoadedComponent:
        """Load a component from `path`: memory, else disk cache, else compile in a child.

        Blocking (seconds when it compiles): call it from the agent's worker thread. Raises
        CompileError when the component does not compile, for that component only. `on_phase`
        hears when it waits and when it compiles.
        """
        told: LoadPhase = on_phase or _quiet
        start = time.perf_counter()
        wasm = path.read_bytes()
        sha = hashlib.sha256(wasm).hexdigest()
        with self._lock:
            key_lock = self._key_locks.setdefault(sha, threading.Lock())
        if key_lock.locked():
            told(WAITING_TO_COMPILE, "another agent is loading the same component")
        with key_lock:  # two agents with one component compile it once
            if sha in self._components:
                return LoadedComponent(
                    self._components[sha], sha, True, time.perf_counter() - start
                )
            component = self._from_cache(sha)
            hit = component is not None
            if component is None:
                component = self._compile(sha, wasm, told)
            self._components[sha] = component
        return LoadedComponent(component, sha, hit, time.perf_counter() - start)

    def prepare(self, path: Path) -> bool:
        """Compile the component at `path` into the disk cache unless it is there (or loaded)
        already, without keeping it in memory: a node that may host a placed agent on a
        takeover has it ready to load in milliseconds (node/placement/prepare.py). True when it
        compiled now. Blocking; raises CompileError as `load` does."""
        wasm = path.read_bytes()
        sha = hashlib.sha256(wasm).hexdigest()
        with self._lock:
            key_lock = self._key_locks.setdefault(sha, threading.Lock())
        with key_lock:
            cached = self._cache_path(sha)
            if sha in self._components or (cached is not None and cached.exists()):
                return False
            self._compile(sha, wasm, _quiet)
            return True

    def _cache_path(self, sha: str) -> Path | None:
        return None if self.cache_dir is None else artifact_path(self.cache_dir, sha)

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

    def _compile(self, sha: str, wasm: bytes, told: LoadPhase) -> cm.Component:
        """Compile in a child into a partial file, validate it by loading it, then cache it."""
        if sha in self._rejected:
            raise self._rejected[sha]
        partial, final = self._partial_file(sha)
        parallel = self.compiler.parallel
        try:
            try:
                self.compiler.compile(
                    wasm,
                    partial,
                    on_wait=lambda: told(
                        WAITING_TO_COMPILE,
                        f"other agents are compiling ({parallel} at a time on this node)",
                    ),
                    on_start=lambda: told(COMPILING, "compiling its component (first load)"),
                )
            except CompileError as e:
                if e.failure == "rejected":
                    self._rejected[sha] = e
                raise
            try:  # the child's output is trusted only once wasmtime accepts it here
                component = cm.Component.deserialize_file(self.engine, str(partial))
            except wasmtime.WasmtimeError as e:
                raise CompileError(f"the compiler's artifact does not load: {e}", "crashed") from e
            self.compiles += 1
            if final is not None:
                try:
                    os.replace(partial, final)  # atomic: readers see all of it or nothing
                except OSError as e:  # a read-only cache slows restarts but breaks nothing
                    log.warning("cannot write compiled component cache %s: %s", final, e)
            return component
        finally:
            partial.unlink(missing_ok=True)  # the mmapped artifact stays valid once unlinked

    def _partial_file(self, sha: str) -> tuple[Path, Path | None]:
        """An empty file for the child to write to: in the cache folder (renamed into place
        when valid), else in the temporary folder (not kept)."""
        final = self._cache_path(sha)
        name = f"{_PARTIAL}{sha[:16]}-{os.urandom(4).hex()}.cwasm"
        if final is not None:
            try:
                final.parent.mkdir(parents=True, exist_ok=True)
                partial = final.parent / name
                partial.touch(mode=0o600, exist_ok=False)  # native code: the node's only
                return partial, final
            except OSError as e:
                log.warning("cannot write compiled component cache in %s: %s", final.parent, e)
        partial = Path(tempfile.gettempdir()) / name
        partial.touch(mode=0o600, exist_ok=False)
        return partial, None

    def remove_stale_partials(self) -> None:
        """Remove partial artifacts a killed node left (older than a day: another node sharing
        the cache folder may be writing a recent one)."""
        if self.cache_dir is None or not self.cache_dir.is_dir():
            return
        now = time.time()
        for leftover in self.cache_dir.glob(f"{_PARTIAL}*"):
            try:
                if now - leftover.stat().st_mtime > _PARTIAL_STALE_SECS:
                    leftover.unlink()
            except OSError:
                pass

    def close(self) -> None:
        self.compiler.close()
        self._stop.set()
        self._ticker.join(timeout=1)
        self._components.clear()


def _quiet(phase: str, reason: str) -> None:
    """No one listens to where the load is."""
