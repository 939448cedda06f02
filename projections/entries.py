"""Logs and findings: append-only read models on disk, polled by their own gap-free `seq`.

Entry `seq` → the entry and the position it came from (msgpack), in LMDB (projections/disk.py):
a page is one cursor walk, whatever the history's length. Findings keep one more database, the
sync incidents already reported. (An index of each journal's findings cost the journal's writer
as much as the entries themselves; the console's one reader of it now reads the node's own
journal instead: node/console/endpoints.py.)
"""

from __future__ import annotations

import struct
from typing import Any

import msgspec

from eventstore.envelope import Envelope
from projections.catalogue import FINDING, LOG
from projections.disk import Space, Txn, from_u64, key_of, u64


class LogEntry(msgspec.Struct, frozen=True, gc=False):
    seq: int
    ts: str
    level: str
    agent: str
    message: str
    # the run's trace id (docs/inference.md "Traces"), when tracing was on for the run
    trace_id: str | None = None


class Finding(msgspec.Struct, frozen=True, gc=False):
    seq: int
    ts: str
    agent: str
    severity: str
    title: str
    detail: str
    # the name of the API token that posted it (POST /api/v1/findings); None: the agent's own,
    # or the node's (its sync incidents)
    posted_by: str | None = None
    trace_id: str | None = None  # as a log entry's


_encode = msgspec.msgpack.Encoder().encode
_SEQ_KEY = struct.Struct(">Q").pack  # an entry's key, as `u64` makes it
# stored: (position, the entry's fields after seq)
_decode_log = msgspec.msgpack.Decoder(tuple[int, str, str, str, str, str]).decode
_decode_finding = msgspec.msgpack.Decoder(tuple[int, str, str, str, str, str, str, str]).decode


# how many of the newest (position, seq) pairs `seq_at` answers without reading LMDB, at least:
# a POST asks for its own entry's seq right after the commit, and a batch holds at most 1,000
# appends
_RECENT = 4096


class _SeqLog:
    """Entries numbered 1, 2, 3... in global order, with the position each came from.

    The seqs of the newest entries are also kept in memory (`_recent`, bounded), so that the
    POST that created an entry learns its seq without a read transaction: each LMDB call on
    the event loop hands the GIL to the journal's writer, and the binary search made about 18.
    Only what a committed transaction folded gets there (`staged_commit`); a rebuild's scratch
    copy keeps none (nothing posts to it)."""

    name = ""
    event_type = ""
    space: Space

    def bind(self, space: Space) -> None:
        self.space = space
        self._entries = space.db(self.name, "entries")
        self._staged: list[tuple[int, int]] = []
        self._caches = not space.scratch
        # two generations, each filled in one C call: the newer becomes the older once full
        self._recent: dict[int, int] = {}
        self._older: dict[int, int] = {}

    def staged_forget(self) -> None:
        self._staged = []

    def staged_commit(self) -> None:
        if len(self._recent) >= _RECENT:
            self._older, self._recent = self._recent, {}
        self._recent.update(self._staged)
        self._staged = []

    def fold(self, txn: Txn, envelope: Envelope) -> None:
        self.fold_many(txn, [envelope])

    def fold_many(self, txn: Txn, envelopes: list[Envelope]) -> list[Envelope]:
        """A whole batch with one cursor (the journal's writer runs this on every commit, and a
        replay on every chunk: the loop keeps to locals); returns the envelopes it added."""
        kind = self.event_type
        added = [envelope for envelope in envelopes if envelope.event.type == kind]
        if not added:
            return added
        cursor = txn.cursor(self._entries)
        first = (from_u64(cursor.key()) if cursor.last() else 0) + 1
        seqs = range(first, first + len(added))
        cursor.putmulti(zip(map(_SEQ_KEY, seqs), self.values(added), strict=True), append=True)
        if self._caches:
            self._staged += zip([e.position for e in added], seqs, strict=True)
        return added

    def values(self, envelopes: list[Envelope]) -> list[bytes]:
        """The stored value of each entry: msgpack of (position, the entry's fields after
        seq). One comprehension per model with the fields inline, since this is most of a
        replay's fold (bench/RESULTS.md, 2026-11-25)."""
        raise NotImplementedError

    def entry(self, seq: int, raw: bytes) -> Any:
        raise NotImplementedError

    def page(self, since: int, limit: int, max_bytes: int = 1 << 62) -> tuple[int, list[Any]]:
        """Entries with seq > since (at most `limit`, and no more once their stored bytes
        reach `max_bytes`) and the `next_seq` to poll with."""
        items: list[Any] = []
        size = 0
        if since >= 0 and limit > 0:
            with self.space.read() as txn:
                cursor = txn.cursor(self._entries)
                if cursor.set_range(u64(since + 1)):
                    for key, raw in cursor:
                        items.append(self.entry(from_u64(key), raw))
                        size += len(raw)
                        if len(items) >= limit or size >= max_bytes:
                            break
        return (items[-1].seq if items else max(since, 0)), items

    def seq_at(self, position: int) -> int | None:
        """The seq of the entry folded from `position` (for the POST that created it): a
        binary search, since seq and position grow together."""
        seq = self._recent.get(position) or self._older.get(position)
        if seq is not None:
            return seq
        with self.space.read() as txn:
            low, high = 1, txn.stat(self._entries)["entries"]
            while low <= high:
                middle = (low + high) // 2
                at = _position_of(txn.get(u64(middle), db=self._entries))
                if at == position:
                    return middle
                if at < position:
                    low = middle + 1
                else:
                    high = middle - 1
        return None

    @property
    def last_seq(self) -> int:
        with self.space.read() as txn:
            return txn.stat(self._entries)["entries"]

    def snapshot(self) -> Any:
        return [msgspec.to_builtins(e) for e in self.page(0, 1 << 62)[1]]


def _position_of(raw: bytes | None) -> int:
    return msgspec.msgpack.decode(raw)[0] if raw else 0


class Logs(_SeqLog):
    name = "logs"
    event_type = LOG
    handles = frozenset({event_type})

    def values(self, envelopes: list[Envelope]) -> list[bytes]:
        encode = _encode
        return [
            encode(
                (
                    e.position,
                    (event := e.event).ts,
                    str((data := event.data).get("level", "info")),
                    e.stream,
                    str(data.get("message", "")),
                    str(data.get("trace_id") or ""),
                )
            )
            for e in envelopes
        ]

    def entry(self, seq: int, raw: bytes) -> LogEntry:
        _, ts, level, agent, message, trace_id = _decode_log(raw)
        return LogEntry(seq, ts, level, agent, message, trace_id or None)


class Findings(_SeqLog):
    """Also the set of sync incidents already reported: a finding carrying an `incident` key
    (node/sync/incidents.py) is reported once, across restarts. A key counts only in the
    journal it names (`<node>/...` in the journal `<node>`, whose home is that node), so a
    finding a peer writes in its own journal cannot pre-suppress this node's alert."""

    name = "findings"
    event_type = FINDING
    handles = frozenset({event_type})

    def bind(self, space: Space) -> None:
        super().bind(space)
        self._incidents = space.db(self.name, "incidents")

    def fold_many(self, txn: Txn, envelopes: list[Envelope]) -> list[Envelope]:
        added = super().fold_many(txn, envelopes)
        for envelope in [e for e in added if "incident" in e.event.data]:
            incident = envelope.event.data.get("incident")
            if isinstance(incident, str) and incident.startswith(envelope.stream + "/"):
                txn.put(key_of(incident), b"", db=self._incidents)
        return added

    def values(self, envelopes: list[Envelope]) -> list[bytes]:
        encode = _encode
        return [
            encode(
                (
                    e.position,
                    (event := e.event).ts,
                    # a finding posted about a name this node does not host sits in the
                    # node's own journal, naming it as its subject
                    str((data := event.data).get("subject") or e.stream),
                    str(data.get("severity", "info")),
                    str(data.get("title", "")),
                    str(data.get("detail", "")),
                    str(data.get("posted_by") or ""),
                    str(data.get("trace_id") or ""),
                )
            )
            for e in envelopes
        ]

    def entry(self, seq: int, raw: bytes) -> Finding:
        _, ts, agent, severity, title, detail, posted_by, trace_id = _decode_finding(raw)
        return Finding(seq, ts, agent, severity, title, detail, posted_by or None, trace_id or None)

    def has_incident(self, incident: str) -> bool:
        with self.space.read() as txn:
            return txn.get(key_of(incident), db=self._incidents) is not None

    def at(self, position: int) -> Finding | None:
        """The finding folded from `position`, if one was."""
        seq = self.seq_at(position)
        return self.page(seq - 1, 1)[1][0] if seq is not None else None

    def snapshot(self) -> dict[str, Any]:
        with self.space.read() as txn:
            incidents = [key.decode("utf-8", "replace") for key, _ in txn.cursor(self._incidents)]
        return {"entries": super().snapshot(), "incidents": incidents}
