"""Compiling components in child processes, bounded in time, memory and number.

The node never runs Cranelift itself: `Compiler.compile` hands the component's bytes to
`python -m node.runtime.compile_child` and waits for it (blocking: call it from a worker
thread or an executor, never from the event loop). A compile that is refused, runs out of its
time or memory, or crashes raises `CompileError` saying which, for that component only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import node
from node.runtime.compile_child import EXIT_OUT_OF_MEMORY, EXIT_REJECTED
from node.runtime.engine_settings import COMPILER_ENV

CompileFailure = Literal["rejected", "timeout", "memory", "crashed", "cancelled"]
MAX_PARALLEL_COMPILES = 4  # each child may use all cores itself; more only adds memory
_STDERR_KEPT = 2000
# The tree `node` was imported from: the child runs the same code as its parent.
_CODE_ROOT = str(Path(node.__file__).resolve().parent.parent)


@dataclass(frozen=True)
class CompileLimits:
    """Per compile: wall-clock seconds and the child's address space (RLIMIT_AS) in MiB."""

    timeout_secs: float = 600.0
    memory_mb: int = 4096


class CompileError(Exception):
    """A component did not compile. `failure` is "rejected" when wasmtime refused it (the
    component's fault, same result every time); otherwise a limit or the compiler failed."""

    def __init__(self, message: str, failure: CompileFailure) -> None:
        super().__init__(message)
        self.failure = failure


def default_parallelism() -> int:
    """How many compiles may run at once: the cores this process may use, at most 4."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_PARALLEL_COMPILES))


class Compiler:
    """Runs compile children, at most `parallel` at a time; `close` kills those running."""

    def __init__(self, limits: CompileLimits | None = None, parallel: int | None = None) -> None:
        self.limits = limits or CompileLimits()
        self.parallel = parallel or default_parallelism()
        self._slots = threading.BoundedSemaphore(self.parallel)
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[bytes]] = set()
        self._closed = False

    def compile(
        self,
        wasm: bytes | Path,
        out: Path | None,
        on_wait: Callable[[], None] | None = None,
        on_start: Callable[[], None] | None = None,
    ) -> None:
        """Compile `wasm` (bytes, or a file fed to the child as its stdin) in a child.

        With `out` (an existing, empty file) the serialized artifact is written there, for
        the caller to validate by deserializing it; without, the component is only checked.
        `on_wait` is told when every slot is taken, `on_start` when this compile starts.
        """
        if not self._slots.acquire(blocking=False):
            if on_wait is not None:
                on_wait()
            self._slots.acquire()
        try:
            if on_start is not None:
                on_start()
            proc = self._spawn(wasm, out)
            try:
                stdin_data = wasm if isinstance(wasm, bytes) else None
                _, stderr = proc.communicate(stdin_data, timeout=self.limits.timeout_secs)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                raise CompileError(
                    f"compiling took longer than this node's limit of "
                    f"{self.limits.timeout_secs:g} s (node.compile_timeout_secs)",
                    "timeout",
                ) from None
            finally:
                with self._lock:
                    self._running.discard(proc)
        finally:
            self._slots.release()
        self._judge(proc.returncode, stderr.decode(errors="replace")[-_STDERR_KEPT:])

    def close(self) -> None:
        """Kill every compile child now (the node is stopping); their callers get "cancelled"."""
        with self._lock:
            self._closed = True
            running = list(self._running)
        for proc in running:
            proc.kill()

    def _spawn(self, wasm: bytes | Path, out: Path | None) -> subprocess.Popen[bytes]:
        command = [
            sys.executable, "-m", "node.runtime.compile_child",
            "--parent", str(os.getpid()), "--memory-mb", str(self.limits.memory_mb),
            *(["--out", str(out)] if out is not None else ["--check"]),
        ]  # fmt: skip
        env = _child_environment()
        with self._lock:
            if self._closed:
                raise CompileError("the node is stopping; compile cancelled", "cancelled")
            if isinstance(wasm, bytes):
                proc = subprocess.Popen(
                    command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE, env=env, cwd=_CODE_ROOT,
                )  # fmt: skip
            else:
                with open(wasm, "rb") as source:
                    proc = subprocess.Popen(
                        command, stdin=source, stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE, env=env, cwd=_CODE_ROOT,
                    )  # fmt: skip
            self._running.add(proc)
        return proc

    def _judge(self, returncode: int, stderr: str) -> None:
        if returncode == 0:
            return
        if self._closed:
            raise CompileError("the node is stopping; compile cancelled", "cancelled")
        last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
        if returncode == EXIT_REJECTED:
            raise CompileError(last or "invalid component", "rejected")
        if returncode == EXIT_OUT_OF_MEMORY or "memory allocation of" in stderr:
            raise CompileError(
                f"the compiler ran out of this node's memory limit of {self.limits.memory_mb} "
                "MiB (node.compile_memory_mb)",
                "memory",
            )
        if returncode < 0:
            name = signal.Signals(-returncode).name if -returncode in _SIGNALS else returncode
            raise CompileError(f"the compiler crashed ({name})", "crashed")
        raise CompileError(f"the compiler failed (exit {returncode}): {last}", "crashed")


_SIGNALS = {s.value for s in signal.Signals}


def _child_environment() -> dict[str, str]:
    """Only what an interpreter needs: the node's secrets and tokens (in its environment) stay
    out of the child, which gets the component's bytes and nothing else."""
    env = {key: os.environ[key] for key in _PASSED_ENV if key in os.environ}
    existing = os.environ.get("PYTHONPATH")
    env["PYTHONPATH"] = _CODE_ROOT if not existing else f"{_CODE_ROOT}{os.pathsep}{existing}"
    return env


# the compiler's choice too: the child compiles with the node's settings, else its artifact
# does not load in the node
_PASSED_ENV = ("PATH", "LANG", "LC_ALL", "TMPDIR", "VIRTUAL_ENV", COMPILER_ENV)
