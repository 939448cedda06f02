"""Checkpoints of the in-memory read models: a start folds only what came after the last one.

Only the read models bounded by live state are in memory (heads, keys, peers, grants,
packages); the ones that grow with history are on disk and never behind the journal
(projections/disk.py). Their state is pickled with the position it reached, the payload hash
of the envelope at that position, and a fingerprint of their source code; a checkpoint is used
only when all three still match, so a changed projection or a journal that does not contain
that envelope means a fold from position 0, and so does one taken before a journal was
rewound (its position is at most the store's `rewound_at`: it may hold removed envelopes).
One is written at every clean shutdown and, while the node runs, every
`[node] checkpoint_events` envelopes or `checkpoint_secs` seconds (whichever comes first, if
anything changed): a node killed with -9 folds only what came after the newest one. The file
lives in the data dir, as trusted as the journal and the node key.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import logging
import pickle
import time
from pathlib import Path

from eventstore.store import EventStore
from node.ops.files import write_atomically
from projections.base import Projections

log = logging.getLogger(__name__)
CHECKPOINT_FILE = "projections.ckpt"
_LOOK_EVERY_SECS = 1.0


def fingerprint(projections: Projections) -> str:
    digest = hashlib.sha256()
    for projection in sorted(projections, key=lambda p: p.name):
        digest.update(projection.name.encode() + b"\0")
        module = inspect.getmodule(type(projection))
        if module is None:  # never for a class; getsource(None) raised a TypeError too
            raise TypeError(f"no module for {type(projection).__qualname__}")
        digest.update(inspect.getsource(module).encode())
    return digest.hexdigest()


def save(projections: Projections, data_dir: Path) -> None:
    """Atomically, so a crash leaves the old one or the new."""
    write_atomically(Path(data_dir) / CHECKPOINT_FILE, dumps(projections))


def dumps(projections: Projections) -> bytes:
    """The state as of now: taken on the loop, between two folds, so it is consistent."""
    state = {
        "fingerprint": fingerprint(projections),
        "position": projections.position,
        "payload_hash": "sha256:" + projections.last_digest.hex(),
        "state": {p.name: p.__dict__ for p in projections},
    }
    return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)


class Periodic:
    """Writes a checkpoint while the node runs: taken on the loop, written (and fsynced) by a
    worker thread, so the loop pays only for pickling the small in-memory state."""

    def __init__(
        self,
        projections: Projections,
        data_dir: Path,
        *,
        every_events: int,
        every_secs: float,
    ) -> None:
        self._projections = projections
        self._path = Path(data_dir) / CHECKPOINT_FILE
        self._every_events = every_events
        self._every_secs = every_secs
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self.saved_at = projections.position  # what the newest checkpoint covers
        self.written = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="checkpoints")

    async def stop(self) -> None:
        """After the write in progress, if any: two writers would share the temporary file."""
        self._stopping.set()
        if self._task is not None:
            await self._task

    async def _run(self) -> None:
        last = time.monotonic()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._stopping.wait(), min(_LOOK_EVERY_SECS, self._every_secs)
                )
            if self._stopping.is_set():
                return
            behind = self._projections.position - self.saved_at
            due = time.monotonic() - last >= self._every_secs
            if behind >= self._every_events or (behind and due):
                try:
                    await self.write()
                except OSError as exc:  # a full disk: the next start folds a longer tail
                    log.warning("could not write the checkpoint: %s", exc)
                last = time.monotonic()

    async def write(self) -> None:
        position, data = self._projections.position, dumps(self._projections)
        await asyncio.get_running_loop().run_in_executor(None, write_atomically, self._path, data)
        self.saved_at = position
        self.written += 1


def restore(projections: Projections, store: EventStore, data_dir: Path) -> bool:
    """Load the checkpoint into the (empty) projections if it still fits; True when it did."""
    path = Path(data_dir) / CHECKPOINT_FILE
    if not path.exists():
        return False
    try:
        with open(path, "rb") as f:
            saved = pickle.load(f)
        position = saved["position"]
        envelope = store.at(position) if position else None
        if saved["fingerprint"] != fingerprint(projections):
            log.info("projection code changed since the checkpoint: full rebuild")
            return False
        if position and (envelope is None or envelope.payload_hash != saved["payload_hash"]):
            log.warning("checkpoint does not match the journal at %d: full rebuild", position)
            return False
        if position and position <= store.rewound_at():
            log.warning("a journal was rewound after the checkpoint at %d: full rebuild", position)
            return False
        for projection in projections:
            projection.__dict__.update(saved["state"][projection.name])
    except Exception as exc:  # a damaged checkpoint only costs a rebuild
        log.warning("ignoring unreadable checkpoint %s: %s", path, exc)
        return False
    projections.position = position
    projections.last_digest = envelope.digest if envelope else b""
    return True
