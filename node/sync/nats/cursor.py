"""Where publishing resumes: per journal, the last seq JetStream acknowledged, kept on disk.

Written atomically (node/ops/files.py) so that a kill -9 leaves the previous cursor or this
one, never a torn file; an unreadable file is not fatal: the publisher compares the stream's
last message of each own journal with it anyway (node/sync/nats/publisher.py).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from node.ops.files import write_atomically

log = logging.getLogger("agent-node.sync")
CURSOR_FILE = "nats-published.json"
CURSOR_SAVE_SECS = 1.0


class Cursor:
    """journal → last seq acknowledged by JetStream, durable across kill -9."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.acked: dict[str, int] = {}
        try:
            loaded = json.loads(path.read_text())
            self.acked = {str(k): int(v) for k, v in loaded.items()}
        except FileNotFoundError:
            pass
        except (ValueError, TypeError, AttributeError):
            log.warning("nats: %s is unreadable; republishing from the stream's heads", path)

    def encoded(self) -> bytes:
        return json.dumps(self.acked, sort_keys=True).encode()

    def save(self) -> None:
        self.write(self.encoded())

    def write(self, encoded: bytes) -> None:
        """Write what `encoded` gave (taken on the loop: acknowledgements change the cursor
        while a thread writes)."""
        write_atomically(self.path, encoded)
