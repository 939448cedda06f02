"""Rewinding a journal: its envelopes after a seq removed, in one write transaction.

The one case the single-writer journal is cut back: a fork between a journal's epochs, where a
new writer's first envelope takes a seq this node already holds from the old writer (docs/
mesh.md, "Placement and failover"). Generic all the same: the store knows nothing of epochs.
The transaction removes the later envelopes' records, their entries in the total order and moves
the head back, records the newest position stored (`meta` "rewound": a checkpoint of read
models taken before it no longer fits, node/ops/checkpoint.py), and, since the indexer folded what
is now gone, empties the indexer and folds the whole journal into it again, so readers see the
old state or the new, never a mix. Rare, so a full refold is the simple, certain way.
"""

from __future__ import annotations

from collections.abc import Iterator

import lmdb

from eventstore.envelope import Envelope
from eventstore.indexing import CATCH_UP_CHUNK, Indexer
from eventstore.layout import (
    REWOUND_KEY,
    Head,
    JournalDbs,
    StreamNames,
    decode_record,
    encode_head,
    event_key,
    position_key,
    stream_prefix,
)
from eventstore.reads import envelopes_of


def rewind_in(
    txn: lmdb.Transaction[bytes],
    dbs: JournalDbs,
    stream: str,
    keep_through: int,
    last_position: int,
) -> list[Envelope]:
    """Remove `stream`'s envelopes after seq `keep_through` inside `txn`; returns them,
    oldest first (none when the journal ends there already)."""
    if keep_through < 0:
        raise ValueError("keep_through must be 0 or more")
    prefix = stream_prefix(stream)
    rows: list[tuple[bytes, bytes]] = []
    cursor = txn.cursor(db=dbs.events)
    if cursor.set_range(event_key(stream, keep_through + 1)):
        for found, raw in cursor:
            key = bytes(found)
            if not key.startswith(prefix) or len(key) != len(prefix) + 8:
                break
            rows.append((key, bytes(raw)))
    if not rows:
        return []
    removed = envelopes_of(rows, StreamNames())
    for envelope, (key, _) in zip(removed, rows, strict=True):
        txn.delete(position_key(envelope.position), db=dbs.all)
        txn.delete(key, db=dbs.events)
    if keep_through == 0:
        txn.delete(stream.encode(), db=dbs.heads)
    else:
        kept = txn.get(event_key(stream, keep_through), db=dbs.events)
        if kept is None:
            raise ValueError(f"{stream} has no seq {keep_through} to keep")
        digest = decode_record(kept)[2]
        txn.put(stream.encode(), encode_head(Head(keep_through, digest)), db=dbs.heads)
    txn.put(REWOUND_KEY, position_key(last_position), db=dbs.meta)
    return removed


def refold(txn: lmdb.Transaction[bytes], dbs: JournalDbs, indexer: Indexer) -> None:
    """Empty the indexer and fold every envelope left into it again, inside `txn`."""
    indexer.reset(txn)
    for chunk in _chunks_in(txn, dbs):
        indexer.fold(txn, chunk)


def _chunks_in(txn: lmdb.Transaction[bytes], dbs: JournalDbs) -> Iterator[list[Envelope]]:
    """Every envelope in position order as `txn` sees it, CATCH_UP_CHUNK at a time."""
    names = StreamNames()
    after = 0
    while True:
        cursor = txn.cursor(db=dbs.all)
        if not cursor.set_range(position_key(after + 1)):
            return
        keys: list[bytes] = []
        for value in cursor.iternext(keys=False, values=True):
            keys.append(bytes(value))
            if len(keys) >= CATCH_UP_CHUNK:
                break
        events = dbs.events
        rows = [(key, bytes(raw)) for key in keys if (raw := txn.get(key, db=events)) is not None]
        chunk = envelopes_of(rows, names)  # in position order, as `all` lists them
        if chunk:
            yield chunk
        if len(keys) < CATCH_UP_CHUNK or not chunk:
            return
        after = chunk[-1].position
