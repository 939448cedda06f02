"""Logs and findings: append-only read models polled by their own gap-free `seq`."""

from __future__ import annotations

from bisect import bisect_right
from typing import Any

import msgspec

from eventstore.envelope import Envelope, Event
from projections.catalogue import FINDING, LOG


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
        event = envelope.event
        if event.type == self.event_type:
            self.entries.append(self.entry(len(self.entries) + 1, envelope.stream, event))
            self._positions.append(envelope.position)

    def entry(self, seq: int, agent: str, event: Event) -> Any:
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

    def snapshot(self) -> Any:
        return [msgspec.to_builtins(e) for e in self.entries]


class Logs(_SeqLog):
    name = "logs"
    event_type = LOG
    handles = frozenset({event_type})

    def entry(self, seq: int, agent: str, event: Event) -> LogEntry:
        data = event.data
        return LogEntry(
            seq, event.ts, str(data.get("level", "info")), agent, str(data.get("message", ""))
        )


class Findings(_SeqLog):
    """Also the set of sync incidents already reported: a finding carrying an `incident` key
    (node/sync/incidents.py) is reported once, across restarts. A key counts only in the
    journal it names (`<node>/...` in the journal `<node>`, whose home is that node), so a
    finding a peer writes in its own journal cannot pre-suppress this node's alert."""

    name = "findings"
    event_type = FINDING
    handles = frozenset({event_type})

    def __init__(self) -> None:
        super().__init__()
        self.incidents: set[str] = set()

    def entry(self, seq: int, agent: str, event: Event) -> Finding:
        data = event.data
        incident = data.get("incident")
        if isinstance(incident, str) and incident.startswith(agent + "/"):
            self.incidents.add(incident)
        return Finding(
            seq,
            event.ts,
            agent,
            str(data.get("severity", "info")),
            str(data.get("title", "")),
            str(data.get("detail", "")),
        )

    def snapshot(self) -> dict[str, Any]:
        return {"entries": super().snapshot(), "incidents": sorted(self.incidents)}
