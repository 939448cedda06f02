"""Projection checkpoints: start-up folds only what came after the last clean shutdown.

The state of every projection is pickled with the position it reached, the payload hash of the
envelope at that position, and a fingerprint of the projections' source code. A checkpoint is
used only when all three still match, so a changed projection or a journal that does not
contain that envelope means a full rebuild from position 0; a node killed with -9 writes no
checkpoint and resumes from the older one, folding everything after it. The file lives in the
data dir, as trusted as the journal and the node key.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import pickle
from pathlib import Path

from eventstore.store import EventStore
from node.files import write_atomically
from projections.base import Projections

log = logging.getLogger(__name__)
CHECKPOINT_FILE = "projections.ckpt"


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
    state = {
        "fingerprint": fingerprint(projections),
        "position": projections.position,
        "payload_hash": "sha256:" + projections.last_digest.hex(),
        "state": {p.name: p.__dict__ for p in projections},
    }
    data = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
    write_atomically(Path(data_dir) / CHECKPOINT_FILE, data)


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
        for projection in projections:
            projection.__dict__.update(saved["state"][projection.name])
    except Exception as exc:  # a damaged checkpoint only costs a rebuild
        log.warning("ignoring unreadable checkpoint %s: %s", path, exc)
        return False
    projections.position = position
    projections.last_digest = envelope.digest if envelope else b""
    return True
