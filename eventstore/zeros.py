"""Written zeros kept ahead of LMDB's last page, so that commits never grow the data file.

A commit that grows the file makes its fdatasync flush the new size as well (a journal commit on
ext4): about a fifth of a 64-append commit here. With written zeros ahead, commits write into
blocks the file already has. (`fallocate` does not help: its unwritten extents cost the same on
first write.) Only the writer thread writes the file, between its transactions and only past the
last page, so LMDB never finds zeros where it wrote a page (docs/design.md "Zeros ahead").
"""

from __future__ import annotations

import os
from pathlib import Path

import lmdb

# as many bytes as the journal uses, within these bounds (a small journal does not get 8 MiB)
ZEROS_AHEAD_MIN, ZEROS_AHEAD_MAX = 1 << 20, 8 << 20


class ZerosAhead:
    """Tops up the zeros after a commit; a few milliseconds once in a while, nothing usually."""

    def __init__(self, env: lmdb.Environment, data_file: Path) -> None:
        self._env = env
        self._data_file = data_file
        self._page_size: int = env.stat()["psize"]
        self._end = 0  # where the zeros written ahead of LMDB's last page end

    def used(self) -> int:
        """Bytes of the data file LMDB uses: up to the end of its last page."""
        last_page: int = self._env.info()["last_pgno"]
        return (last_page + 1) * self._page_size

    def keep(self) -> None:
        """Zero-fill the data file ahead of LMDB's last page, up to a few MiB at a time."""
        info = self._env.info()
        used = (info["last_pgno"] + 1) * self._page_size
        ahead = min(max(used, ZEROS_AHEAD_MIN), ZEROS_AHEAD_MAX)
        if self._end - used >= ahead // 2:
            return
        target = min(used + ahead, info["map_size"])
        if target <= self._end:  # the map's end: nothing more to write before it grows
            return
        try:
            with open(self._data_file, "r+b") as data:
                end = data.seek(0, os.SEEK_END)
                if end < target:
                    data.write(bytes(target - end))
                    os.fdatasync(data.fileno())
                self._end = max(end, target)
        except OSError:  # a full disk: commits still work, they only pay for growing the file
            self._end = target
