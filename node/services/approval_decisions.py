"""Deciding approval requests: one, a batch, or every request a canceled task asked for. A
decision binds to the request's hash; one on an orphaned request is recorded for a later
identical request (`later`), as node/services/approvals.py explains.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any, Literal, cast

import msgspec

from eventstore.envelope import Envelope
from eventstore.store import NewEvent
from node.context import NodeContext
from node.services.journal import ensure_local
from node.web.http import Problem
from projections import catalogue as c
from projections.approvals import ApprovalRequest, Approvals, Outcome
from projections.journals import Journals
from projections.tasks import Tasks

Decision = Literal["approve", "deny"]


class ApprovalDecisions:
    """Operators' decisions on the gate's pending requests (the gate, node/services/approvals.py,
    holds the state this reads: its waiting calls and the ids being resolved)."""

    ctx: NodeContext
    _waiters: dict[str, asyncio.Future[Outcome]]
    _claimed: set[str]

    @property
    def projection(self) -> Approvals:
        return self.ctx.projections.get(Approvals)

    def is_orphaned(self, request: ApprovalRequest) -> bool:
        """Pending, hosted here, and no running call waits for it: the agent instance that
        asked is gone (a restart, a crash). A decision on it applies if the agent asks for
        exactly the same again."""
        return request.id not in self._waiters and self.ctx.projections.get(Journals).home_of(
            request.agent
        ) in (None, self.ctx.name)

    def can_ask_again(self, request: ApprovalRequest) -> bool:
        """Whether an agent could ask for exactly this again: it is hosted here and the
        request has its hash (one journaled before requests carried it cannot be matched)."""
        return bool(request.request_hash) and self.ctx.config.agent(request.agent) is not None

    async def claim(self, approval_id: str) -> None:
        """Apply the decision recorded on an orphaned request, now that its call waits."""
        request = self.projection.get(approval_id)
        if request is None or request.recorded is None or approval_id in self._claimed:
            return  # resolved meanwhile, or being decided: the waiter learns it from the commit
        decision = cast(Decision, request.recorded)
        await self._append_decision(
            request, decision, request.recorded_by or "", request.recorded_reason
        )

    async def decide(
        self,
        approval_id: str,
        decision: Decision,
        operator: str,
        request_hash: str | None = None,
        reason: str | None = None,
        later: bool | None = None,
    ) -> dict[str, Any]:
        """Decide one pending request; 404 when unknown, already decided or timed out, 409
        with the reason when the node abandoned it.

        With `request_hash`, the decision holds only for that exact request (409 otherwise);
        `reason` says why: the operator's reason for a denial, or the node's own. On an
        orphaned request (no running call waits) the decision is recorded for a later
        identical request (`later`; the node's own decisions pass False: they close it).
        """
        request = self.projection.get(approval_id)
        if request is None or approval_id in self._claimed:
            closed = self.projection.resolution(approval_id)
            if closed is not None and closed.outcome == "abandoned":
                raise Problem(
                    409, f"approval {approval_id} was abandoned: {closed.reason or 'no reason'}"
                )
            raise Problem(404, f"no pending approval with id {approval_id!r}")
        ensure_local(self.ctx, request.agent)
        if request_hash is not None and request_hash != request.request_hash:
            raise Problem(
                409,
                f"approval {approval_id} is for request {request.request_hash or '(unhashed)'}, "
                f"not {request_hash[:80]}",
            )
        waited = not self.is_orphaned(request)
        if later is None:
            later = not waited and self.can_ask_again(request)
        envelope = await self._append_decision(request, decision, operator, reason, later)
        if later and approval_id in self._waiters:
            await self.claim(approval_id)  # the agent asked again while it was journaled
        result = {
            "id": approval_id,
            "decision": decision,
            "decided_at": envelope.event.ts,
            "operator": operator,
            "request_hash": request.request_hash,
            "applies": "later" if later else "now" if waited else "never",
            "effect": (
                f"recorded: it applies if {request.agent} asks for the same again"
                if later
                else "given to the waiting call"
                if waited
                else "closed: no call waits and nothing can ask for this again"
            ),
        }
        if reason is not None:
            result["reason"] = reason
        return result

    async def _append_decision(
        self,
        request: ApprovalRequest,
        decision: Decision,
        operator: str,
        reason: str | None,
        later: bool = False,
    ) -> Envelope:
        self._claimed.add(request.id)
        try:
            decided = _decided(request.id, decision, operator, request.request_hash, reason)
            if later:
                decided = msgspec.structs.replace(decided, later=True)
            return await self.ctx.store.append(request.agent, *c.event_of(decided))
        finally:
            self._claimed.discard(request.id)

    async def deny_for_task(self, agent: str, task_id: str, operator: str, reason: str) -> int:
        """Deny every pending request a task's run asked for; how many were denied."""
        denied = 0
        for approval_id in self.ctx.projections.get(Tasks).asked_by(agent, task_id):
            with contextlib.suppress(Problem):  # decided or timed out meanwhile
                await self.decide(approval_id, "deny", operator, reason=reason, later=False)
                denied += 1
        return denied

    async def decide_batch(
        self, ids: Iterable[str], decision: Decision, operator: str, reason: str | None = None
    ) -> dict[str, Any]:
        """Decide every pending local id in one atomic append; the rest are listed as skipped.

        Unknown, already resolved and replicated (decided on their home node) ids are skipped;
        a repeated id counts once. Orphaned ones are recorded for later, as `decide` does.
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
            event = _decided(approval_id, decision, operator, request.request_hash, reason)
            if self.is_orphaned(request) and self.can_ask_again(request):  # for later
                event = msgspec.structs.replace(event, later=True)
            events.append(NewEvent(request.agent, *c.event_of(event)))
        if events:
            self._claimed.update(decided)
            try:
                await self.ctx.store.append_many(events)
            finally:
                self._claimed.difference_update(decided)
        return {"decided": len(decided), "ids": decided, "skipped": skipped}


def _decided(
    approval_id: str,
    decision: Decision,
    operator: str,
    request_hash: str,
    reason: str | None = None,
) -> c.ApprovalDecided:
    return c.ApprovalDecided(
        id=approval_id,
        decision=decision,
        operator=operator,
        request_hash=request_hash,
        reason=reason,
    )
