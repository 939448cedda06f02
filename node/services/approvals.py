"""The approval gate: a gated capability waits here until an operator decides or time runs out.

Everything goes through the agent's journal: `request` appends `approval.requested` and waits;
`decide` appends `approval.decided`; a timer appends `approval.timed_out`. Waiters are released
by a commit listener that watches for those resolutions, so a waiter learns its outcome from
the journal, whoever wrote it. Timers are armed from the projection at start, so requests left
pending by a stopped node still time out (at once when already overdue).

A request is the exact text the agent will perform, journaled with its hash; a decision
binds to that hash (a decision naming another hash is refused), and after a restart an agent
asking again is matched to a request left pending only when the hash is the same. A request
asked by a task's run is denied by the node itself, with a reason, when the task is canceled.

A pending request no running call waits for is orphaned: a decision on it is journaled for
later (`approval.decided` `later`) and taken by the next identical request; the node closes
with `approval.abandoned` what can never apply (its agent stopped or replaced, its task ended,
the agent asked that capability for something else in the same place). What happened to each
request is read from the tasks read model's changes, never from event types.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Iterable
from typing import Any, Literal, cast

import msgspec
from aiohttp import web

from eventstore.envelope import Envelope
from eventstore.store import NewEvent
from node.context import NodeContext
from node.http import Problem
from node.request_summary import summary  # the one-line `detail`, from the request's shape
from node.services.approval_follower import ApprovalFollower
from node.services.approval_timeouts import ApprovalTimeouts
from node.services.journal import ensure_local
from projections import catalogue as c
from projections.approvals import (
    DEFAULT_TIMEOUT_SECS,
    ApprovalRequest,
    Approvals,
    Outcome,
    Verdict,
    hash_request,
)
from projections.journals import Journals
from projections.tasks import Tasks

log = logging.getLogger(__name__)
Decision = Literal["approve", "deny"]
# (agent, capability, request_hash): what identifies "the same request" across restarts
RequestKey = tuple[str, str, str]


class GateClosedError(RuntimeError):
    """The node is shutting down; the request stays pending in the journal."""


class ApprovalGate:
    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx
        self._waiters: dict[str, asyncio.Future[Outcome]] = {}
        # ids with a resolution being appended: a concurrent decide or timer must not add another
        self._claimed: set[str] = set()
        self._timeouts = ApprovalTimeouts(ctx, self._claimed)
        self._follower = ApprovalFollower(self)
        self._closed = False

    @property
    def projection(self) -> Approvals:
        return self.ctx.projections.get(Approvals)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Follow resolutions in the journal and arm a timer for every local pending request."""
        self.ctx.store.add_commit_listener(self._follower.on_commit)
        await self._timeouts.start()

    async def close(self) -> None:
        """Stop the timers; waiters get GateClosedError (their requests stay pending)."""
        self._closed = True
        await self._timeouts.close()
        self._follower.cancel()
        for future in self._waiters.values():
            if not future.done():
                future.set_exception(GateClosedError("the node is shutting down"))
        self._waiters.clear()

    # ------------------------------------------------------------------ commands
    async def request(
        self,
        agent: str,
        capability: str,
        request: str,
        timeout_secs: int | None = None,
        task_id: str | None = None,
    ) -> Outcome:
        """`ask`, answering the outcome only: "approve", "deny" or "timeout"."""
        return (await self.ask(agent, capability, request, timeout_secs, task_id)).outcome

    async def ask(
        self,
        agent: str,
        capability: str,
        request: str,
        timeout_secs: int | None = None,
        task_id: str | None = None,
    ) -> Verdict:
        """`request`, answering with who decided and why as well (the host tells the agent).

        `task_id` names the task whose run asks, so that canceling the task denies it.
        """
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
        request_hash = hash_request(request)
        key = (agent, capability, request_hash)
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        orphan = self._orphan(key)
        if orphan is not None:
            # The same request, left pending by an agent instance that is gone (a restart):
            # take the decision recorded on it, or wait for one, instead of asking twice.
            self._waiters[orphan.id] = future
            try:
                if orphan.recorded is not None:
                    await self.claim(orphan.id)
                return self._verdict(orphan.id, await future)
            finally:
                self._waiters.pop(orphan.id, None)
        await self._abandon_replaced(agent, capability, task_id, request)
        approval_id = str(uuid.uuid4())
        self._waiters[approval_id] = future
        data: dict[str, Any] = {
            "id": approval_id,
            "capability": capability,
            "detail": summary(capability, request),
            "request": request,
            "request_hash": request_hash,
            "timeout_secs": timeout_secs,
        }
        if task_id is not None:
            data["task"] = task_id
        try:
            await self.ctx.store.append(agent, *c.event_of(c.ApprovalRequested(**data)))
            self._timeouts.arm(approval_id, timeout_secs)
            return self._verdict(approval_id, await future)
        finally:
            self._waiters.pop(approval_id, None)

    def _verdict(self, approval_id: str, outcome: Outcome) -> Verdict:
        """The outcome with the decider and reason the journal holds for it."""
        resolution = self.projection.resolution(approval_id)
        if resolution is None:
            return Verdict(outcome)
        return Verdict(outcome, resolution.operator, resolution.reason)

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

    def _orphan(self, key: RequestKey) -> ApprovalRequest | None:
        """A request left pending by a previous run, for the same thing, that nobody awaits.

        One whose decision is being journaled right now counts too: the agent then waits for
        that decision rather than asking again and missing it.
        """
        agent, capability, request_hash = key
        for request in self.projection.list():
            if (
                request.agent == agent
                and request.capability == capability
                and request.request_hash == request_hash
                and request.id not in self._waiters
            ):
                return request
        return None

    async def claim(self, approval_id: str) -> None:
        """Apply the decision recorded on an orphaned request, now that its call waits."""
        request = self.projection.get(approval_id)
        if request is None or request.recorded is None or approval_id in self._claimed:
            return  # resolved meanwhile, or being decided: the waiter learns it from the commit
        decision = cast(Decision, request.recorded)
        await self._append_decision(
            request, decision, request.recorded_by or "", request.recorded_reason
        )

    async def _abandon_replaced(
        self, agent: str, capability: str, task_id: str | None, request: str
    ) -> None:
        """The agent asks `capability` for something else where an orphaned request of the
        same capability was asked (the same task, or a tick): that one can never apply."""
        replaced = [
            r.id
            for r in self.projection.list()
            if r.agent == agent
            and r.capability == capability
            and r.task == task_id
            and self.is_orphaned(r)
        ]
        if replaced:
            where = f"task {task_id}" if task_id else "a tick"
            reason = f"{agent} asked {capability} for something else in {where}: " + summary(
                capability, request
            )
            await self.abandon(replaced, reason)

    async def abandon(self, ids: Iterable[str], reason: str) -> list[str]:
        """Close pending requests that can never apply (`approval.abandoned`, with why)."""
        requests = [
            r
            for i in dict.fromkeys(ids)
            if i not in self._claimed and (r := self.projection.get(i))
        ]
        if not requests or self._closed:
            return []
        abandoned = [r.id for r in requests]
        self._claimed.update(abandoned)
        try:
            await self.ctx.store.append_many(
                [
                    NewEvent(r.agent, *c.event_of(c.ApprovalAbandoned(id=r.id, reason=reason)))
                    for r in requests
                ]
            )
        finally:
            self._claimed.difference_update(abandoned)
        return abandoned

    async def abandon_agent(self, agent: str, reason: str) -> list[str]:
        """The agent was stopped, upgraded or removed: what it asked can no longer apply."""
        pending = [r.id for r in self.projection.list() if r.agent == agent]
        return await self.abandon(pending, reason)

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

    # ------------------------------------------------------------------ for the follower
    @property
    def closed(self) -> bool:
        return self._closed

    def waits_for(self, approval_id: str) -> bool:
        return approval_id in self._waiters

    def resolved(self, approval_id: str, outcome: str) -> None:
        """Release the call waiting for a request resolved in the journal, and its timer."""
        self._timeouts.cancel(approval_id)
        future = self._waiters.get(approval_id)
        if future is not None and not future.done():
            # abandoned while a call waited (its agent stopped): the call may not go ahead
            future.set_result(cast(Outcome, "deny" if outcome == "abandoned" else outcome))


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


APPROVALS = web.AppKey("approvals", ApprovalGate)
