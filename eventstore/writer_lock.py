"""One writer per environment: one store per path in this process, one writing process per path.

py-lmdb refuses to open an environment twice in a process, and two writers would interleave
commits; so a second store on a path in this process is refused (`claim_path`) and a second
writing process (a second node on the data dir, or `key rotate` next to a running node) is
refused by an exclusive `flock` (`WriterLock`). Readers need neither: LMDB lets offline tools
read next to a running node. The OS drops the lock when the process dies, `kill -9` included.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

WRITER_LOCK = "writer.lock"  # in the environment's folder, flock()ed by the writing process

_open_paths: set[str] = set()
_open_paths_lock = threading.Lock()


class StoreAlreadyOpenError(RuntimeError):
    """A second store on the same environment would be a second writer."""


def claim_path(path: Path) -> str:
    """Claim `path` for one store in this process; returns the key to `release_path` with."""
    real = os.path.realpath(path)
    with _open_paths_lock:
        if real in _open_paths:
            raise StoreAlreadyOpenError(f"{path} is already open in this process")
        _open_paths.add(real)
    return real


def release_path(real: str) -> None:
    with _open_paths_lock:
        _open_paths.discard(real)


class WriterLock:
    """The writing process's `flock` on `<environment>/writer.lock`, taken once, held until
    `release` (or the process's end)."""

    def __init__(self, folder: Path) -> None:
        self._file = folder / WRITER_LOCK
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock unless held already; refuse if another process holds it."""
        if self._fd is not None:
            return
        fd = os.open(self._file, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise StoreAlreadyOpenError(
                f"{self._file.parent} is being written by another process (a running node?)"
            ) from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the flock
            self._fd = None
