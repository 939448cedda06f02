"""Deciding approval requests: one, a batch, or every request a canceled task asked for. A
decision binds to the request's hash; one on an orphaned request is recorded for a later
identical request (`later`), as node/services/approvals.py explains.

A request that needs several approvers (`approvers`, set by a policy: docs/approvals.md) takes
each approval as an `approval.endorsed` and stays pending; the approval that completes the
count is journaled with the `approval.decided` in one write. The same token counts once, an
approval that fills no open seat (the token is in none of the groups still missing) is refused,
and any denial decides. Approvals of one request are counted one at a time (`_endorsing`), so
two arriving together cannot both be the last or both miss it.
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
from node.policy.approvers import Approver, Progress, progress, would_count
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
    _endorsing: asyncio.Lock  # approvals of requests that need several approvers, one at a time

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
        groups: frozenset[str] = frozenset(),
    ) -> dict[str, Any]:
        """Decide one pending request; 404 when unknown, already decided or timed out, 409
        with the reason when the node abandoned it. On a request that needs several
        approvers, an approval counts toward them (`groups`: the token's), see above.

        With `request_hash`, the decision holds only for that exact request (409 otherwise);
        `reason` says why: the operator's reason for a denial, or the node's own. On an
        orphaned request (no running call waits) the decision is recorded for a later
        identical request (`later`; the node's own decisions pass False: they close it).
        """
        request = self._pending(approval_id, request_hash)
        if decision == "approve" and request.approvers:
            return await self._endorse(approval_id, operator, groups, request_hash)
        waited = not self.is_orphaned(request)
        if later is None:
            later = not waited and self.can_ask_again(request)
        envelope = await self._append_decision(request, decision, operator, reason, later)
        if later and approval_id in self._waiters:
            await self.claim(approval_id)  # the agent asked again while it was journaled
        result = _result(request, decision, operator, envelope, waited, later)
        if reason is not None:
            result["reason"] = reason
        return result

    def _pending(self, approval_id: str, request_hash: str | None) -> ApprovalRequest:
        """The pending request a decision may apply to, or the Problem saying why not."""
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
        return request

    async def _endorse(
        self,
        approval_id: str,
        operator: str,
        groups: frozenset[str],
        request_hash: str | None,
    ) -> dict[str, Any]:
        """One approval of a request that needs several: 409 when this token approved it
        already, 403 when it fills no seat still open; the last one decides."""
        async with self._endorsing:
            request = self._pending(approval_id, request_hash)  # again: it may have moved on
            events, after, refusal = self._endorsement(request, operator, groups)
            if refusal is not None:
                raise refusal
            waited = not self.is_orphaned(request)
            later = after.complete and not waited and self.can_ask_again(request)
            if later:
                events[-1] = msgspec.structs.replace(events[-1], later=True)
            if after.complete:
                self._claimed.add(approval_id)
            try:
                envelopes = await self.ctx.store.append_many(
                    [NewEvent(request.agent, *c.event_of(e)) for e in events]
                )
            finally:
                self._claimed.discard(approval_id)
        if later and approval_id in self._waiters:
            await self.claim(approval_id)
        if after.complete:
            result = _result(request, "approve", operator, envelopes[-1], waited, later)
        else:
            result = {
                "id": approval_id,
                "decision": "approve",
                "decided_at": envelopes[-1].event.ts,
                "operator": operator,
                "request_hash": request.request_hash,
                "applies": "waiting",
                "effect": f"counted: {after.text}; it stays pending until then",
            }
        result["approvals"] = progress_view(after)
        return result

    def _endorsement(
        self, request: ApprovalRequest, operator: str, groups: frozenset[str]
    ) -> tuple[list[c.Payload], Progress, Problem | None]:
        """The events one more approval writes (and the decision, when it completes the
        count), where the request stands after it, or why it does not count."""
        slots = request.approvers or ()
        given = [Approver(e.operator, frozenset(e.groups)) for e in request.endorsements or ()]
        now = progress(slots, given)
        if any(a.name == operator for a in given):
            why = f"{operator} approved {request.id} already (a token counts once): {now.text}"
            return [], now, Problem(409, why)
        newcomer = Approver(operator, groups)
        if not would_count(slots, given, newcomer):
            why = (
                f"{operator}'s approval would not count: {request.id} is {now.text}, and "
                f"{operator} is in none of the groups still missing"
            )
            return [], now, Problem(403, why)
        after = progress(slots, [*given, newcomer])
        events: list[c.Payload] = [
            c.ApprovalEndorsed(
                id=request.id,
                operator=operator,
                request_hash=request.request_hash,
                groups=sorted(groups),
            )
        ]
        if after.complete:
            decided = _decided(request.id, "approve", operator, request.request_hash)
            events.append(msgspec.structs.replace(decided, approvers=after.approved_by))
        return events, after, None

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
        self,
        ids: Iterable[str],
        decision: Decision,
        operator: str,
        reason: str | None = None,
        groups: frozenset[str] = frozenset(),
    ) -> dict[str, Any]:
        """Decide every pending local id in one atomic append; the rest are listed as skipped.

        Unknown, already resolved and replicated (decided on their home node) ids are skipped;
        a repeated id counts once. Orphaned ones are recorded for later, as `decide` does. An
        approval of a request that needs several approvers counts toward them (`waiting`
        lists those it left pending); one this token gave already, or that fills no open seat,
        is skipped.
        """
        ids = list(ids)
        if decision == "approve" and any(
            (request := self.projection.get(i)) is not None and request.approvers for i in ids
        ):
            async with self._endorsing:
                return await self._decide_batch(ids, decision, operator, reason, groups)
        return await self._decide_batch(ids, decision, operator, reason, groups)

    async def _decide_batch(
        self,
        ids: Iterable[str],
        decision: Decision,
        operator: str,
        reason: str | None,
        groups: frozenset[str],
    ) -> dict[str, Any]:
        decided: list[str] = []
        waiting: list[str] = []
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
            later = self.is_orphaned(request) and self.can_ask_again(request)
            if decision == "approve" and request.approvers:
                counted, after, refusal = self._endorsement(request, operator, groups)
                if refusal is not None:
                    skipped.append(approval_id)
                    continue
                (decided if after.complete else waiting).append(approval_id)
            else:
                counted = [_decided(approval_id, decision, operator, request.request_hash, reason)]
                decided.append(approval_id)
            if later and isinstance(counted[-1], c.ApprovalDecided):  # for later
                counted[-1] = msgspec.structs.replace(counted[-1], later=True)
            events.extend(NewEvent(request.agent, *c.event_of(e)) for e in counted)
        if events:
            self._claimed.update(decided)
            try:
                await self.ctx.store.append_many(events)
            finally:
                self._claimed.difference_update(decided)
        result: dict[str, Any] = {"decided": len(decided), "ids": decided, "skipped": skipped}
        if waiting:
            result["waiting"] = waiting
        return result


def progress_view(now: Progress) -> dict[str, Any]:
    """Where a request that needs several approvers stands, as the API shows it."""
    return {
        "needed": now.needed,
        "approved_by": now.approved_by,
        "waiting_for": now.waiting_for,
        "progress": now.text,
    }


def _result(
    request: ApprovalRequest,
    decision: Decision,
    operator: str,
    envelope: Envelope,
    waited: bool,
    later: bool,
) -> dict[str, Any]:
    """The answer to a decision: when it was journaled, and what it does."""
    return {
        "id": request.id,
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
