"""Logs and findings: append-only read models polled by their own gap-free `seq`."""

from __future__ import annotations

from bisect import bisect_right
from typing import Any

import msgspec

from eventstore.envelope import Envelope

LOG_LEVELS = ("trace", "debug", "info", "warn", "error")
SEVERITIES = ("info", "low", "medium", "high", "critical")


class LogEntry(msgspec.Struct, frozen=True, gc=False):
    seq: int
    ts: str
    level: str
    agent: str
    message: str


class Finding(msgspec.Struct, frozen=True, gc=False):
    seq: int
    ts: str
    agent: str
    severity: str
    title: str
    detail: str


class _SeqLog:
    """Entries numbered 1, 2, 3... in global order, with the position each came from."""

    name = ""
    event_type = ""

    def __init__(self) -> None:
        self.entries: list[Any] = []
        self._positions: list[int] = []

    def apply(self, envelope: Envelope) -> None:
        if envelope.event.type != self.event_type:
            return
        entry = self.make(len(self.entries) + 1, envelope)
        if entry is not None:
            self.entries.append(entry)
            self._positions.append(envelope.position)

    def make(self, seq: int, envelope: Envelope) -> Any:
        raise NotImplementedError

    def page(self, since: int, limit: int) -> tuple[int, list[Any]]:
        """Entries with seq > since (at most `limit`) and the `next_seq` to poll with."""
        items = self.entries[since : since + limit] if since >= 0 else []
        return (items[-1].seq if items else max(since, 0)), items

    def seq_at(self, position: int) -> int | None:
        """The seq of the entry folded from `position` (for the POST that created it)."""
        index = bisect_right(self._positions, position) - 1
        if index >= 0 and self._positions[index] == position:
            return index + 1
        return None

    @property
    def last_seq(self) -> int:
        return len(self.entries)

    def snapshot(self) -> list[Any]:
        return [msgspec.to_builtins(e) for e in self.entries]


class Logs(_SeqLog):
    name = "logs"
    event_type = "log"
    handles = frozenset({"log"})

    def make(self, seq: int, envelope: Envelope) -> LogEntry | None:
        data = envelope.event.data
        return LogEntry(
            seq=seq,
            ts=envelope.event.ts,
            level=str(data.get("level", "info")),
            agent=envelope.stream,
            message=str(data.get("message", "")),
        )


class Findings(_SeqLog):
    name = "findings"
    event_type = "finding"
    handles = frozenset({"finding"})

    def make(self, seq: int, envelope: Envelope) -> Finding | None:
        data = envelope.event.data
        return Finding(
            seq=seq,
            ts=envelope.event.ts,
            agent=envelope.stream,
            severity=str(data.get("severity", "info")),
            title=str(data.get("title", "")),
            detail=str(data.get("detail", "")),
        )
