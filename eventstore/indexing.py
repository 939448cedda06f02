"""Read models written inside the journal's own transactions (the `Indexer` protocol), and the
catch-up that folds what an indexer lacks before the writer starts.

Because an indexer folds in the same write transaction as the envelopes it folds, it is exactly
as far as the journal after any stop, `kill -9` included. The store knows nothing of what an
indexer holds (projections/disk.py does).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from typing import Protocol

import lmdb

from eventstore.envelope import Envelope
from eventstore.growth import MapGate
from eventstore.reads import JournalReader

CATCH_UP_CHUNK = 8192  # envelopes folded per write transaction while catching up

ReadTxn = Callable[[], "contextlib.AbstractContextManager[lmdb.Transaction[bytes]]"]
# wraps the catch-up's chunks, given how many envelopes are behind (a progress bar)
Progress = Callable[[Iterator[list[Envelope]], int], Iterable[Sequence[Envelope]]]


class Indexer(Protocol):
    """Read models kept in the journal's environment and written in the journal's own write
    transactions, so they are exactly as far as the journal after any stop, `kill -9`
    included. The store knows nothing of what they hold (projections/disk.py does)."""

    def attach(self, env: lmdb.Environment, read: ReadTxn) -> None:
        """Open its databases (before any write) and keep `read` for its readers: the
        store's read transactions, which wait while the map grows."""

    def prepare(self, txn: lmdb.Transaction[bytes]) -> None:
        """In the writing process's first write transaction: a chance to empty what it must
        fold again (its position then drops, and `catch_up_index` refolds)."""

    def reset(self, txn: lmdb.Transaction[bytes]) -> None:
        """Empty what it holds (position 0): a rewind removed envelopes it folded, and the
        store folds every envelope left into it again, in the same transaction."""

    def position(self, txn: lmdb.Transaction[bytes]) -> int:
        """The position of the newest envelope it folded."""

    def fold(self, txn: lmdb.Transaction[bytes], envelopes: Sequence[Envelope]) -> None:
        """Fold envelopes newer than its position, inside the write transaction; it must not
        raise (a fault in one read model is its own to report) or the batch fails."""

    def committed(self) -> None:
        """The transaction of the last `fold` committed: report what it found (a batch that
        had to be retried is folded again, so nothing is reported twice)."""


def catch_up(
    indexer: Indexer,
    gate: MapGate,
    reader: JournalReader,
    last_position: int,
    progress: Progress | None = None,
    chunk: int = CATCH_UP_CHUNK,
) -> int:
    """Let the indexer `prepare`, then fold every stored envelope after its position up to
    `last_position`, `chunk` per write transaction (each committed before the next is read).
    Returns how many envelopes it folded."""
    gate.write_growing(indexer.prepare)
    with gate.read() as txn:
        done = indexer.position(txn)
    behind = last_position - done
    if behind <= 0:
        return 0
    stored = reader.iter_chunks(done, chunk)
    chunks: Iterable[Sequence[Envelope]] = stored if progress is None else progress(stored, behind)
    for envelopes in chunks:
        gate.write_growing(partial(indexer.fold, envelopes=envelopes))
        indexer.committed()
    return behind
