"""Files the node writes beside its journal: whole or not at all, even across a crash."""

from __future__ import annotations

import os
from pathlib import Path

from eventstore.durable import fsync_path


def write_atomically(path: Path, data: bytes, *, mode: int = 0o600, durable: bool = True) -> None:
    """Write to a temporary file in the same folder, then rename it over `path`, so a reader
    (or a restart after a crash) sees the old content or the new, never a torn one. `durable`
    also fsyncs the file and its folder, so the new content survives a power loss once this
    returns; a cache that is cheap to rebuild can skip that."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_path(path.parent)


def move_durably(source: Path, target: Path) -> None:
    """Rename `source` to `target` (same file system) and make the rename survive a crash."""
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(source, target)
    fsync_path(target.parent)
