"""The gate's policy step: the policy set in force (reloaded on SIGHUP), a ruling on each
request of a capability decided by policy (`[agents.approval] cap = "policy"`), and what the
ruling adds to the request's write.

A permit or a forbid becomes an `approval.decided` whose operator is `policy:<id>`, with the
set's hash and the policies' ids (`policy`) and, for a permit, what it charged to budgets; the
gate journals it in the same atomic write as the `approval.requested`, so such a request is
never pending. An ask adds the policy's reason and the approvers it needs to the request.
Budgets are checked and charged here, on the event loop, with nothing awaited in between
(node/policy/budgets.py explains why no two requests can both slip under a limit).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from eventstore.envelope import Envelope
from node.config.model import Config
from node.context import NodeContext
from node.policy.budgets import Budget, InFlight
from node.policy.engine import Ruling, TaskFacts, evaluate, within_budgets
from node.policy.policyset import PolicySet, load_policy_set
from projections import catalogue as c
from projections.approvals import Approvals
from projections.tasks import Tasks

log = logging.getLogger(__name__)
POLICY_OPERATOR = "policy:"  # + the deciding policy's @id: the operator of its decisions


@dataclass
class Ruled:
    """A ruling as the gate writes it: the decision (permit or forbid) journaled with the
    request, or what the request asks of people."""

    ruling: Ruling
    policy: c.PolicyRef
    decided: c.ApprovalDecided | None = None
    approvers: list[c.ApproverSlot] | None = None


class PolicyStep:
    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx
        self.current: PolicySet = load_policy_set(ctx.config)
        self._in_flight = InFlight()
        # when a request is asked: the policies' `context.time` and the budgets' windows (a
        # test of the example policy's office hours sets a weekday here)
        self.clock: Callable[[], datetime] = lambda: datetime.now().astimezone()

    def reload(self, config: Config) -> str:
        """Use the policy set of `config` from the next request on (SIGHUP); its hash. Raises
        PolicyError, keeping the running set, when it does not load."""
        self.current = load_policy_set(config)
        rules = len(self.current.rules)
        log.info("policy set %s in force (%d policies)", self.current.digest, rules)
        return self.current.digest

    @property
    def approvals(self) -> Approvals:
        return self.ctx.projections.get(Approvals)

    def rule(
        self,
        agent: str,
        capability: str,
        request: str,
        approval_id: str,
        request_hash: str,
        task_id: str | None,
    ) -> Ruled:
        """The ruling on one request and the events it adds; a permit's budget charges count
        from here on (`release` them if the write fails)."""
        now = self.clock()
        policies = self.current
        ruling = evaluate(policies, agent, capability, request, now, self._task(task_id))
        rulings = self.ctx.metrics.policy_rulings
        if ruling.outcome == "forbid":
            rulings.labels(outcome="forbid").inc()
            ref = _ref(ruling, policies)
            denied = c.ApprovalDecided(
                id=approval_id,
                decision="deny",
                operator=POLICY_OPERATOR + ruling.ids[0],
                request_hash=request_hash,
                reason=ruling.reason,
                policy=ref,
            )
            return Ruled(ruling, ref, decided=denied)
        ruled = (
            self._permit(agent, capability, approval_id, request_hash, ruling, policies, now)
            if ruling.outcome == "permit"
            else _ask(ruling, policies)
        )
        rulings.labels(outcome="permit" if ruled.decided is not None else "ask").inc()
        return ruled

    def _permit(
        self,
        agent: str,
        capability: str,
        approval_id: str,
        request_hash: str,
        ruling: Ruling,
        policies: PolicySet,
        now: datetime,
    ) -> Ruled:
        """The permit, charged to its budgets; an ask, saying why, when a budget has no room
        for it. What the read model holds and what is in flight count alike."""
        delivered = self.ctx.store.last_position

        def spent(policy_id: str, budget: Budget, scope: str) -> Decimal:
            since = now - timedelta(seconds=budget.period_secs)
            micros = int(since.timestamp() * 1_000_000)
            folded = self.approvals.spent(agent, capability, policy_id, micros, delivered, scope)
            return folded + self._in_flight.of((scope or agent, capability, policy_id))

        config = self.ctx.config
        charges = within_budgets(ruling, spent, agent, config.agent_groups, self.ctx.name)
        if isinstance(charges, Ruling):
            return _ask(charges, policies)
        for charge in charges:
            key = (charge.scope or agent, capability, charge.budget)
            self._in_flight.add(approval_id, key, Decimal(charge.amount))
        ref = _ref(ruling, policies)
        approved = c.ApprovalDecided(
            id=approval_id,
            decision="approve",
            operator=POLICY_OPERATOR + ruling.ids[0],
            request_hash=request_hash,
            policy=ref,
            charges=charges or None,
        )
        return Ruled(ruling, ref, decided=approved)

    def on_commit(self, envelopes: list[Envelope]) -> None:
        """A commit listener: the charges these writes carry now count in the read model."""
        if not self._in_flight:
            return
        for envelope in envelopes:
            approval_id = envelope.event.data.get("id")
            if isinstance(approval_id, str):
                self._in_flight.settle(approval_id)

    def release(self, approval_id: str) -> None:
        """The write of that request failed: its charges will never count."""
        self._in_flight.settle(approval_id)

    def _task(self, task_id: str | None) -> TaskFacts | None:
        if task_id is None:
            return None
        task = self.ctx.projections.get(Tasks).get(task_id)
        if task is None:
            return TaskFacts(task_id)
        return task_facts(task_id, task.created_by or None, task.from_)


def _ask(ruling: Ruling, policies: PolicySet) -> Ruled:
    """People decide: with the approvers the ruling needs (one, unless a policy says more)."""
    ref = _ref(ruling, policies)
    one = not ruling.approvers or ruling.approvers == (c.ApproverSlot(count=1),)
    return Ruled(ruling, ref, approvers=None if one else list(ruling.approvers))


def _ref(ruling: Ruling, policies: PolicySet) -> c.PolicyRef:
    """Which set and policies ruled, and why: within the catalogue's bounds, so every peer
    takes the event (the first policies that applied, when an unusual set has more)."""
    ids = list(ruling.ids[: c.MAX_POLICY_IDS])
    return c.PolicyRef(set=policies.digest, ids=ids, reason=ruling.reason)


def task_facts(task_id: str, caller: str | None, from_: str | None) -> TaskFacts:
    """What a policy may know of who made a task: the API token, or else the agent that
    created it (a token's `from` is only its word, so it is not passed)."""
    if caller:
        return TaskFacts(task_id, caller=caller)
    return TaskFacts(task_id, from_agent=from_ or None)
