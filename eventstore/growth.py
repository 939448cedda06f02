"""Map growth: the LMDB map doubles when full, which needs no transaction open in the process.

Every read transaction passes a gate that counts it; growing closes the gate, waits for the
open readers to finish, resizes and reopens it. Reads are therefore kept short (chunked scans),
and a write that finds the map full is retried after the growth (`write_growing`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import lmdb


class MapGate:
    """The environment's read transactions and its growth, kept apart."""

    def __init__(self, env: lmdb.Environment) -> None:
        self._env = env
        self._readers = 0
        self._resizing = False
        self._cond = threading.Condition()

    @property
    def map_size(self) -> int:
        size: int = self._env.info()["map_size"]
        return size

    @contextmanager
    def read(self) -> Iterator[lmdb.Transaction[bytes]]:
        """A read transaction (values as `bytes`), opened once no growth is under way."""
        with self._cond:
            while self._resizing:
                self._cond.wait()
            self._readers += 1
        try:
            with self._env.begin(buffers=False) as txn:
                yield txn
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    def grow(self) -> None:
        """Double map_size; called by the writer between its transactions."""
        with self._cond:
            self._resizing = True
            while self._readers:
                self._cond.wait()
            try:
                self._env.set_mapsize(self._env.info()["map_size"] * 2)
            finally:
                self._resizing = False
                self._cond.notify_all()

    def write_growing(self, write: Callable[[lmdb.Transaction[bytes]], None]) -> None:
        """One write transaction, retried with a larger map while the map is full."""
        while True:
            try:
                with self._env.begin(write=True) as txn:
                    write(txn)
                return
            except lmdb.MapFullError:
                self.grow()
