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
    """Entries numbered 1, 2, 3... in global order, with the position each came from.

    Subclasses fold with their own `apply`: on a replay the fold is most of the cost, and one
    Python call per envelope is all it can afford.
    """

    name = ""

    def __init__(self) -> None:
        self.entries: list[Any] = []
        self._positions: list[int] = []

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

    def snapshot(self) -> Any:
        return [msgspec.to_builtins(e) for e in self.entries]


class Logs(_SeqLog):
    name = "logs"
    handles = frozenset({"log"})

    def apply(self, envelope: Envelope) -> None:
        event = envelope.event
        if event.type != "log":
            return
        data = event.data
        self.entries.append(
            LogEntry(
                len(self.entries) + 1,
                event.ts,
                str(data.get("level", "info")),
                envelope.stream,
                str(data.get("message", "")),
            )
        )
        self._positions.append(envelope.position)


class Findings(_SeqLog):
    """Also the set of sync incidents already reported: a finding carrying an `incident` key
    (node/sync/incidents.py) is reported once, across restarts."""

    name = "findings"
    handles = frozenset({"finding"})

    def __init__(self) -> None:
        super().__init__()
        self.incidents: set[str] = set()

    def apply(self, envelope: Envelope) -> None:
        event = envelope.event
        if event.type != "finding":
            return
        data = event.data
        self.entries.append(
            Finding(
                len(self.entries) + 1,
                event.ts,
                envelope.stream,
                str(data.get("severity", "info")),
                str(data.get("title", "")),
                str(data.get("detail", "")),
            )
        )
        self._positions.append(envelope.position)
        incident = data.get("incident")
        if isinstance(incident, str):
            self.incidents.add(incident)

    def snapshot(self) -> dict[str, Any]:
        return {"entries": super().snapshot(), "incidents": sorted(self.incidents)}
