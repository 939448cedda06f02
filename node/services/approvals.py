"""The approval gate: a gated capability waits here until an operator decides or time runs out.

Everything goes through the agent's journal: `request` appends `approval.requested` and waits;
`decide` appends `approval.decided`; a timer appends `approval.timed_out`. Waiters are released
by a commit listener that watches for those resolutions, so a waiter learns its outcome from
the journal, whoever wrote it. Timers are armed from the projection at start, so requests left
pending by a stopped node still time out (at once when already overdue).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, Literal

from aiohttp import web

from eventstore.envelope import Envelope
from eventstore.store import NewEvent
from node.context import NodeContext
from node.http import Problem
from node.services.journal import ensure_local
from projections import catalogue as c
from projections.approvals import DEFAULT_TIMEOUT_SECS, Approvals
from projections.journals import Journals
from projections.ownership import Owners

log = logging.getLogger(__name__)
Decision = Literal["approve", "deny"]
Outcome = Literal["approve", "deny", "timeout"]


class GateClosedError(RuntimeError):
    """The node is shutting down; the request stays pending in the journal."""


class ApprovalGate:
    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx
        self._waiters: dict[str, asyncio.Future[Outcome]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        # ids with a resolution being appended: a concurrent decide or timer must not add another
        self._claimed: set[str] = set()
        self._due: set[str] = set()
        # Requests left pending by a previous run of the node (their agent instance is gone),
        # by id, and the decisions on them that arrived before the agent asked again.
        self._orphans: dict[str, tuple[str, str, str]] = {}
        self._unclaimed: dict[tuple[str, str, str], Outcome] = {}
        self._flusher: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def projection(self) -> Approvals:
        return self.ctx.projections.get(Approvals)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Follow resolutions in the journal and arm a timer for every local pending request."""
        self.ctx.store.add_commit_listener(self._on_commit)
        now = datetime.now(UTC)
        journals = self.ctx.projections.get(Journals)
        overdue = []
        for request in self.projection.list():
            if journals.home_of(request.agent) not in (None, self.ctx.name):
                continue  # a replica: its home node times it out
            remaining = _seconds_until(request.expires_at, now, request.timeout_secs)
            if remaining <= 0:
                overdue.append(request.id)
            else:
                self._arm(request.id, remaining)
                self._orphans[request.id] = (request.agent, request.capability, request.detail)
        if overdue:
            log.info("timing out %d approval(s) that expired while the node was down", len(overdue))
            self._due.update(overdue)
            await self._flush_due()

    async def close(self) -> None:
        """Stop the timers; waiters get GateClosedError (their requests stay pending)."""
        self._closed = True
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        for future in self._waiters.values():
            if not future.done():
                future.set_exception(GateClosedError("the node is shutting down"))
        self._waiters.clear()

    # ------------------------------------------------------------------ commands
    async def request(
        self, agent: str, capability: str, detail: str, timeout_secs: int | None = None
    ) -> Outcome:
        """Journal a request and wait for its outcome: "approve", "deny" or "timeout"."""
        if self._closed:
            raise GateClosedError("the node is shutting down")
        ensure_local(self.ctx, agent)
        if timeout_secs is None:
            agent_config = self.ctx.config.agent(agent)
            timeout_secs = (
                agent_config.approval_timeout_secs if agent_config else DEFAULT_TIMEOUT_SECS
            )
        if timeout_secs <= 0:
            raise ValueError("timeout_secs must be positive")
        decided = self._unclaimed.pop((agent, capability, detail), None)
        if decided is not None:
            return decided  # decided while the agent was restarting: no second request
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        orphan = self._orphan(agent, capability, detail)
        if orphan is not None:
            # The same request, left pending by an agent instance that is gone (a restart):
            # wait for the operator's decision on it instead of asking twice.
            self._waiters[orphan] = future
            try:
                return await future
            finally:
                self._waiters.pop(orphan, None)
        approval_id = str(uuid.uuid4())
        self._waiters[approval_id] = future
        try:
            await self.ctx.store.append(
                agent,
                *c.event_of(
                    c.ApprovalRequested(
                        id=approval_id,
                        capability=capability,
                        detail=detail,
                        timeout_secs=timeout_secs,
                    )
                ),
            )
            self._arm(approval_id, timeout_secs)
            return await future
        finally:
            self._waiters.pop(approval_id, None)

    def _orphan(self, agent: str, capability: str, detail: str) -> str | None:
        """A request left pending by a previous run, for the same thing, that nobody awaits.

        One whose decision is being journaled right now counts too: the agent then waits for
        that decision rather than asking again and missing it.
        """
        for approval_id, key in self._orphans.items():
            if (
                key == (agent, capability, detail)
                and approval_id not in self._waiters
                and approval_id in self.projection.pending
            ):
                return approval_id
        return None

    async def decide(self, approval_id: str, decision: Decision, operator: str) -> dict[str, Any]:
        """Decide one pending request; 404 when unknown, already decided or timed out."""
        request = self.projection.get(approval_id)
        if request is None or approval_id in self._claimed:
            raise Problem(404, f"no pending approval with id {approval_id!r}")
        ensure_local(self.ctx, request.agent)
        self._claimed.add(approval_id)
        try:
            envelope = await self.ctx.store.append(
                request.agent,
                *c.event_of(
                    c.ApprovalDecided(id=approval_id, decision=decision, operator=operator)
                ),
            )
        finally:
            self._claimed.discard(approval_id)
        return {
            "id": approval_id,
            "decision": decision,
            "decided_at": envelope.event.ts,
            "operator": operator,
        }

    async def decide_batch(
        self, ids: Iterable[str], decision: Decision, operator: str
    ) -> dict[str, Any]:
        """Decide every pending local id in one atomic append; the rest are listed as skipped.

        Unknown, already resolved and replicated (decided on their home node) ids are skipped;
        a repeated id counts once.
        """
        decided: list[str] = []
        skipped: list[str] = []
        journals = self.ctx.projections.get(Journals)
        seen: set[str] = set()
        events: list[NewEvent] = []
        for approval_id in ids:
            if approval_id in seen:
                continue
            seen.add(approval_id)
            request = self.projection.get(approval_id)
            if (
                request is None
                or approval_id in self._claimed
                or journals.home_of(request.agent) not in (None, self.ctx.name)
            ):
                skipped.append(approval_id)
                continue
            decided.append(approval_id)
            events.append(
                NewEvent(
                    request.agent,
                    *c.event_of(
                        c.ApprovalDecided(id=approval_id, decision=decision, operator=operator)
                    ),
                )
            )
        if events:
            self._claimed.update(decided)
            try:
                await self.ctx.store.append_many(events)
            finally:
                self._claimed.difference_update(decided)
        return {"decided": len(decided), "ids": decided, "skipped": skipped}

    # ------------------------------------------------------------------ timers
    def _arm(self, approval_id: str, delay: float) -> None:
        if self._closed or approval_id not in self.projection.pending:
            return
        loop = asyncio.get_running_loop()
        self._timers[approval_id] = loop.call_later(delay, self._expire, approval_id)

    def _expire(self, approval_id: str) -> None:
        self._timers.pop(approval_id, None)
        self._due.add(approval_id)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush_due())

    async def _flush_due(self) -> None:
        """Append `approval.timed_out` for every due request still pending, in one transaction."""
        while self._due and not self._closed:
            due, self._due = self._due, set()
            ids = [
                i for i in sorted(due) if i in self.projection.pending and i not in self._claimed
            ]
            if not ids:
                continue
            events = [
                NewEvent(self.projection.pending[i].agent, *c.event_of(c.ApprovalTimedOut(id=i)))
                for i in ids
            ]
            self._claimed.update(ids)
            try:
                await self.ctx.store.append_many(events)
            except Exception:
                log.exception("could not journal %d approval timeout(s); retrying", len(ids))
                self._due.update(ids)
                await asyncio.sleep(1)
            finally:
                self._claimed.difference_update(ids)

    # ------------------------------------------------------------------ journal follower
    def _on_commit(self, envelopes: list[Envelope]) -> None:
        """Release the waiter and drop the timer of every request resolved in this commit."""
        for envelope in envelopes:
            kind = envelope.event.type
            if kind == c.APPROVAL_DECIDED:
                outcome = envelope.event.data.get("decision")
            elif kind == c.APPROVAL_TIMED_OUT:
                outcome = "timeout"
            else:
                continue
            if not self.ctx.projections.get(Owners).allows(envelope):
                continue  # a journal that does not own this approval cannot resolve it
            approval_id = envelope.event.data.get("id")
            if not isinstance(approval_id, str) or approval_id in self.projection.pending:
                continue  # not a resolution the projection accepted
            handle = self._timers.pop(approval_id, None)
            if handle is not None:
                handle.cancel()
            future = self._waiters.get(approval_id)
            orphan = self._orphans.pop(approval_id, None)
            if future is not None and not future.done():
                future.set_result(outcome)
            elif orphan is not None and outcome in ("approve", "deny"):
                self._unclaimed[orphan] = outcome


def _seconds_until(timestamp: str, now: datetime, fallback: float) -> float:
    """Seconds from `now` to an ISO timestamp; `fallback` when a foreign one does not parse."""
    try:
        moment = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return fallback
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - now).total_seconds()


APPROVALS = web.AppKey("approvals", ApprovalGate)
