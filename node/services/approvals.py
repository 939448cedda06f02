"""The approval gate: a gated capability waits here until an operator decides or time runs out.

Everything goes through the agent's journal: `ask` appends `approval.requested` and waits;
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
import logging
import uuid
from collections.abc import Callable, Iterable
from typing import Any, cast

from aiohttp import web

from eventstore.store import NewEvent
from node.context import NodeContext
from node.display.request_summary import summary  # the one-line `detail`, from the request's shape
from node.services.approval_decisions import ApprovalDecisions
from node.services.approval_follower import ApprovalFollower
from node.services.approval_policy import PolicyStep, Ruled
from node.services.approval_timeouts import ApprovalTimeouts
from node.services.journal import ensure_local
from projections import catalogue as c
from projections.approvals import (
    DEFAULT_TIMEOUT_SECS,
    ApprovalRequest,
    Outcome,
    Verdict,
    hash_request,
)

log = logging.getLogger(__name__)
# (agent, capability, request_hash): what identifies "the same request" across restarts
RequestKey = tuple[str, str, str]


class GateClosedError(RuntimeError):
    """The node is shutting down; the request stays pending in the journal."""


class ApprovalGate(ApprovalDecisions):
    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx
        self._waiters: dict[str, asyncio.Future[Outcome]] = {}
        # ids with a resolution being appended: a concurrent decide or timer must not add another
        self._claimed: set[str] = set()
        self._endorsing = asyncio.Lock()
        self._timeouts = ApprovalTimeouts(ctx, self._claimed)
        self._follower = ApprovalFollower(self)
        self._closed = False
        self.policy = PolicyStep(ctx)  # the policy set in force (issue 47)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Follow resolutions in the journal and arm a timer for every local pending request."""
        self.ctx.store.add_commit_listener(self.policy.on_commit)  # budgets in flight
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
    async def ask(
        self,
        agent: str,
        capability: str,
        request: str,
        timeout_secs: int | None = None,
        task_id: str | None = None,
        policy: bool = False,
        call: str | None = None,
        waiting: Callable[[], None] | None = None,
    ) -> Verdict:
        """Journal `approval.requested` and wait: the outcome ("approve", "deny" or "timeout")
        with who decided and why (the host tells the agent).

        `task_id` names the task whose run asks, so that canceling the task denies it. With
        `policy`, the policy set rules first: a permit or a forbid is journaled with the request
        in one write and returned at once; an ask waits for the people it names. `call` names
        the recorded host call that asks (node/runtime/callrecords.py): approved, it is not
        asked again when a resumed run makes the same call in the same place. `waiting` is
        told (on the loop) once the request waits for people, not a policy: a task's run then
        parks (node/runtime/parking.py) while this coroutine goes on waiting.
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
                elif waiting is not None:
                    waiting()
                return self._verdict(orphan.id, await future)
            finally:
                self._waiters.pop(orphan.id, None)
        await self._abandon_replaced(agent, capability, task_id, request)
        approval_id = str(uuid.uuid4())
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
        if call is not None:
            data["call"] = call
        if policy:
            ruled = self.policy.rule(agent, capability, request, approval_id, request_hash, task_id)
            data.update(policy=ruled.policy, approvers=ruled.approvers)
            if ruled.decided is not None:
                return await self._decided_by_policy(agent, c.ApprovalRequested(**data), ruled)
        self._waiters[approval_id] = future
        try:
            await self.ctx.store.append(agent, *c.event_of(c.ApprovalRequested(**data)))
            self._timeouts.arm(approval_id, timeout_secs)
            if waiting is not None:
                waiting()
            return self._verdict(approval_id, await future)
        finally:
            self._waiters.pop(approval_id, None)

    async def _decided_by_policy(
        self, agent: str, requested: c.ApprovalRequested, ruled: Ruled
    ) -> Verdict:
        """The request and the policy's decision in one atomic write: never pending."""
        assert ruled.decided is not None
        try:
            await self.ctx.store.append_many(
                [
                    NewEvent(agent, *c.event_of(requested)),
                    NewEvent(agent, *c.event_of(ruled.decided)),
                ]
            )
        except Exception:  # not written (a cancel is not: the write may still commit)
            self.policy.release(requested.id)
            raise
        return self._verdict(requested.id, ruled.decided.decision)

    def _verdict(self, approval_id: str, outcome: Outcome) -> Verdict:
        """The outcome with the decider and reason the journal holds for it."""
        resolution = self.projection.resolution(approval_id)
        if resolution is None:
            return Verdict(outcome)
        return Verdict(outcome, resolution.operator, resolution.reason)

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


APPROVALS = web.AppKey("approvals", ApprovalGate)
