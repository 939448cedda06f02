"""Sync faults an operator must see (equivocation, a changed peer key) as findings, once each.

They go into the journal named after this node: its home is here, so it is replicated like any
agent's journal and the whole mesh learns of the fault. The `incident` key dedupes across
restarts (the findings read model, projections/entries.py, keeps the set).
"""

from __future__ import annotations

import logging

from node.context import NodeContext
from node.services.findings import NewFinding, report_finding
from projections import catalogue as c
from projections.entries import Findings
from projections.journals import Journals

log = logging.getLogger("agent-node.sync")


class Incidents:
    def __init__(self, ctx: NodeContext) -> None:
        self._ctx = ctx
        self._in_flight: set[str] = set()

    def seen(self, key: str) -> bool:
        full = self._full(key)
        return full in self._in_flight or self._ctx.projections.get(Findings).has_incident(full)

    async def report(self, key: str, severity: c.Severity, title: str, detail: str) -> None:
        """Journal a finding for `key` unless one was already journaled."""
        if self.seen(key):
            return
        ctx, full = self._ctx, self._full(key)
        log.warning("%s: %s", title, detail)
        home = ctx.projections.get(Journals).home_of(ctx.name)
        if home not in (None, ctx.name):
            log.error("journal %r belongs to node %r; sync finding not journaled", ctx.name, home)
            return
        self._in_flight.add(full)
        try:
            finding = NewFinding(agent=ctx.name, severity=severity, title=title, detail=detail)
            await report_finding(ctx, finding, incident=full)
        finally:
            self._in_flight.discard(full)

    def _full(self, key: str) -> str:
        return f"{self._ctx.name}/{key}"
