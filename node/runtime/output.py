"""Captures an agent's stdout/stderr as lines, bounded, for `log` events.

WASI writes the agent's stdout and stderr to two files of its own (a fresh pair per
instance); the worker reads what is new after each run. Files rather than WasiConfig's
Python callbacks: those run on wasmtime's I/O threads and cost ~0.2 ms per write in thread
hand-offs, and must not outlive the interpreter. A chatty or hostile agent cannot grow memory
or disk without bound: each read takes at most `max_bytes` (the rest is skipped), read
ranges are released with FALLOC_FL_PUNCH_HOLE (every 64 KiB read, not every read), long
lines are cut and excess lines dropped, with a note saying so. Disk is bounded during a run
too, not only after it: `trim`, called every few milliseconds by the runtime's OutputGuard
thread, drops (punches out) the unread part of a file once it passes `max_bytes`, so an
agent printing in a loop for its whole run
holds at most about `max_bytes` plus one guard interval's writes on disk.

On Linux the two "files" are memfds (anonymous, in memory, reached by wasmtime through
/proc/self/fd): what an agent prints, a secret it read included, never reaches the disk or
another user unredacted; the bounds above then bound memory instead of disk.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import threading
from collections import deque
from pathlib import Path
from typing import Literal

import wasmtime

Stream = Literal["stdout", "stderr"]
STREAMS: tuple[Stream, Stream] = ("stdout", "stderr")
_FALLOC_PUNCH_HOLE = 0x01 | 0x02  # FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
_ids = itertools.count(1)
# read ranges are released once this much has been read since the last release
_PUNCH_EVERY = 64 << 10
_FIRST_READ = 4096  # bytes of each file read per run before looking for more
_PROC_FDS = "/proc/self/fd"


def _in_memory(name: str) -> tuple[Path, int] | None:
    """An anonymous in-memory file (memfd) and a path that opens it, or None where there is
    none (not Linux, no /proc). What an agent prints may hold a secret it read: in memory it
    reaches no disk and no other user, and only its redacted lines are kept (docs/security.md).
    """
    if not hasattr(os, "memfd_create") or not os.path.isdir(_PROC_FDS):
        return None
    try:
        fd = os.memfd_create(f"agent-output-{name}")  # close-on-exec: no compile child has it
    except OSError:
        return None
    return Path(_PROC_FDS, str(fd)), fd


class _File:
    def __init__(self, path: Path) -> None:
        memory = _in_memory(path.name)
        if memory is not None:
            self.path, self.fd, self.in_memory = *memory, True
        else:  # a file in the runtime's private output folder, deleted with the instance
            self.path, self.in_memory = path, False
            path.touch(mode=0o600)
            self.fd = os.open(path, os.O_RDWR)  # punching holes needs write access
        self.offset = 0
        self.punched = 0  # [0, punched) holds no disk blocks
        self.partial = bytearray()
        self.lock = threading.Lock()  # the worker reads, the guard trims

    def drop_excess(self, limit: int) -> int:
        """Skip (and free) every unread byte once more than `limit` are waiting."""
        if self.fd < 0:
            return 0
        end = os.fstat(self.fd).st_size
        if end - self.offset <= limit:
            return 0
        skipped = end - self.offset
        self.offset = end
        self.partial.clear()  # the rest of that line is gone
        _punch(self.fd, end)
        self.punched = end
        return skipped

    def read(self, limit: int) -> tuple[bytes, int]:
        """New bytes (at most `limit`) and how many more were skipped. One system call when
        the agent wrote less than 4 KiB (every run reads both files)."""
        # a small read first: a read of `limit` (1 MiB) asks for that much memory on every
        # call; a run's output usually fits, the rest is read only when the first came back full
        data = os.pread(self.fd, min(limit, _FIRST_READ), self.offset)
        if not data:
            return data, 0  # a quiet stream (most runs, and stderr nearly always)
        if len(data) == _FIRST_READ < limit:
            data += os.pread(self.fd, limit - _FIRST_READ, self.offset + _FIRST_READ)
        end = self.offset + len(data)
        if len(data) == limit:  # perhaps more: skip it
            end = max(end, os.fstat(self.fd).st_size)
        skipped = end - self.offset - len(data)
        if end - self.punched >= _PUNCH_EVERY:  # not per tick: a system call each
            _punch(self.fd, end)
            self.punched = end
        self.offset = end
        return data, skipped

    def close(self) -> None:
        with self.lock:
            os.close(self.fd)
            self.fd = -1
        if not self.in_memory:
            self.path.unlink(missing_ok=True)


def _punch(fd: int, end: int) -> None:
    """Free the disk blocks of [0, end); the file keeps its size (reads are by offset)."""
    with contextlib.suppress(Exception):  # only frees disk; fine where unsupported
        _libc.fallocate(fd, _FALLOC_PUNCH_HOLE, 0, end)


class OutputCapture:
    def __init__(
        self,
        directory: Path,
        name: str,
        max_line: int = 4096,
        max_lines: int = 200,
        max_bytes: int = 1 << 20,
    ) -> None:
        self.directory = directory
        self.name = name
        self.max_line = max_line
        self.max_lines = max_lines
        self.max_bytes = max_bytes
        self._files: dict[Stream, _File] = {}
        self._lines: deque[tuple[Stream, str]] = deque()
        self._dropped_lines = 0
        self._skipped_bytes = 0
        self._skipped_lock = threading.Lock()
        self.stderr_tail: deque[str] = deque(maxlen=5)

    def attach(self, wasi: wasmtime.WasiConfig) -> None:
        """Point a new instance's stdout/stderr at fresh files (the old ones are read first)."""
        self.detach()
        self.stderr_tail.clear()
        self.directory.mkdir(parents=True, exist_ok=True)
        n = next(_ids)
        for stream in STREAMS:
            f = _File(self.directory / f"{self.name}.{n}.{stream}")
            self._files[stream] = f
            setattr(wasi, f"{stream}_file", str(f.path))

    def path(self, stream: Stream) -> Path:
        """Where the current instance's `stream` goes (a /proc/self/fd path for a memfd)."""
        return self._files[stream].path

    def detach(self) -> None:
        """Collect what is left, close and delete the files."""
        self.collect(flush_partial=True)
        for f in self._files.values():
            f.close()
        self._files.clear()

    def collect(self, flush_partial: bool = False) -> None:
        """Read what the agent wrote since the last call into complete lines."""
        for stream, f in self._files.items():
            with f.lock:
                data, skipped = f.read(self.max_bytes)
            if skipped:
                with self._skipped_lock:
                    self._skipped_bytes += skipped
            if not data and not (flush_partial and f.partial):
                continue  # the usual tick of a quiet stream: nothing more to do
            if not f.partial and data.endswith(b"\n"):  # whole lines (a print): no buffer
                for raw in data[:-1].split(b"\n"):
                    self._add(stream, raw)
                continue
            f.partial += data
            while (end := f.partial.find(b"\n")) >= 0:
                self._add(stream, bytes(f.partial[:end]))
                del f.partial[: end + 1]
            if len(f.partial) > self.max_line or (flush_partial and f.partial):
                self._add(stream, bytes(f.partial))
                f.partial.clear()

    def trim(self) -> None:
        """Bound the disk an instance's output holds while it runs (any thread)."""
        for f in list(self._files.values()):
            with f.lock:
                try:
                    skipped = f.drop_excess(self.max_bytes)
                except OSError:  # closed by the worker meanwhile
                    continue
            if skipped:
                with self._skipped_lock:
                    self._skipped_bytes += skipped

    def _add(self, stream: Stream, raw: bytes) -> None:
        line = raw.decode("utf-8", "replace").rstrip("\r")
        if len(line) > self.max_line:
            line = line[: self.max_line] + " [cut]"
        if stream == "stderr" and line.strip():
            self.stderr_tail.append(line)
        if len(self._lines) >= self.max_lines:
            self._dropped_lines += 1
            return
        self._lines.append((stream, line))

    def drain(self) -> list[tuple[Stream, str]]:
        """Collected lines, oldest first, plus a note if any output was dropped."""
        if not self._lines and not self._dropped_lines and not self._skipped_bytes:
            return []  # read without the lock: a count the guard just raised waits a run
        lines = list(self._lines)
        self._lines.clear()
        if not self._dropped_lines and not self._skipped_bytes:
            return lines
        with self._skipped_lock:
            skipped, self._skipped_bytes = self._skipped_bytes, 0
        if self._dropped_lines or skipped:
            lines.append(
                ("stderr", f"[output dropped: {self._dropped_lines} lines, {skipped} bytes]")
            )
            self._dropped_lines = 0
        return lines
