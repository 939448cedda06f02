"""An approval the agent's tool call waits on, asked of the MCP caller as an elicitation.

While a `tools/call` of a session whose client declared the `elicitation` capability is
answered as a stream, every approval request the agent journals (its worker runs one thing at a
time, so during the call they are the call's) is looked at: one still pending (the policy set
rules first: a request it decided is never pending), that the caller's token may decide (on a
request that needs several approvers, its approval must fill a seat still open for its groups:
node/policy/approvers.py), is sent to the client as `elicitation/create` on the call's stream.
The answer is a decision like any other, through the gate (node/services/approval_decisions.py)
bound to the request's hash, journaled with the token's name as the operator: `accept` with
`decision` "approve" or "deny" (and an optional `reason`), `decline` a denial, `cancel` leaves the
request pending for the other doors (REST, the console, AG-UI, A2A). A token that may not decide
is not asked: the call waits as it would without MCP, until someone who may decides or the
request times out. The client's answer is awaited no longer than the request's timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from aiohttp import web

from node.placement.key import confirmed
from node.policy.approvers import Approver, would_count
from node.protocols.mcp_sessions import McpSession, SessionLimitError
from node.runtime.mcp_notices import CallNotices
from node.services.approval_decisions import Decision
from node.services.approvals import ApprovalGate
from node.streams.bus import EventBus
from node.streams.frames import Item
from node.web.http import Problem
from projections.approvals import ApprovalRequest

log = logging.getLogger(__name__)
MAX_REASON = 500  # a denial's reason, as the REST decision takes it
SCHEMA = {
    "type": "object",
    "properties": {
        "decision": {
            "type": "string",
            "title": "Decision",
            "enum": ["approve", "deny"],
            "enumNames": ["Approve", "Deny"],
        },
        "reason": {
            "type": "string",
            "title": "Reason",
            "description": "Why (kept in the history, given to the agent on a denial)",
            "maxLength": MAX_REASON,
        },
    },
    "required": ["decision"],
}


def may_decide(request: ApprovalRequest, caller: str, groups: frozenset[str]) -> bool:
    """Whether the caller's decision would count: any token that may call the endpoint
    (operate) decides a request that needs one approver; one that needs several takes an
    approval only where it fills a seat still open (a denial by anyone decides, but a token
    that could not approve is not asked to choose)."""
    slots = request.approvers or ()
    if not slots:
        return True
    given = [Approver(e.operator, frozenset(e.groups)) for e in request.endorsements or ()]
    if any(a.name == caller for a in given):
        return False
    return would_count(slots, given, Approver(caller, groups))


def elicitation(approval_id: str, request: ApprovalRequest) -> dict[str, Any]:
    asked = (
        f"approve {request.capability}: {request.request}"
        if request.request
        else (request.detail or f"approve {request.capability}")
    )
    return {
        "jsonrpc": "2.0",
        "id": f"approval-{approval_id}",
        "method": "elicitation/create",
        "params": {
            "message": f"{request.agent} asks: {asked}"[:4096],
            "requestedSchema": SCHEMA,
            "_meta": {
                "agent-node/approval": {
                    "id": approval_id,
                    "capability": request.capability,
                    "requestHash": request.request_hash,
                    "expiresAt": request.expires_at,
                }
            },
        },
    }


def decision_of(answer: dict[str, Any]) -> tuple[Decision, str | None] | None:
    """The decision in the client's answer (None: none, the request stays pending)."""
    result = answer.get("result")
    if not isinstance(result, dict):
        return None
    action = result.get("action")
    content = result.get("content") if isinstance(result.get("content"), dict) else {}
    reason = content.get("reason") if isinstance(content, dict) else None
    reason = reason.strip()[:MAX_REASON] or None if isinstance(reason, str) else None
    if action == "decline":
        return "deny", reason or "declined through MCP elicitation"
    if action != "accept" or not isinstance(content, dict):
        return None
    decision = content.get("decision")
    if decision == "approve":
        return "approve", reason
    if decision == "deny":
        return "deny", reason
    return None


class ApprovalAsker:
    """Follows the agent's approval requests for one streamed call (start … stop)."""

    def __init__(
        self,
        app: web.Application,
        gate: ApprovalGate,
        bus: EventBus,
        agent: str,
        session: McpSession,
        notices: CallNotices,
    ) -> None:
        self.app = app
        self.gate = gate
        self.bus = bus
        self.agent = agent
        self.session = session
        self.notices = notices
        self._asking: set[asyncio.Task[None]] = set()
        self._subscription: Any = None

    def start(self) -> None:
        def seen(item: Item) -> bool:
            approval_id = item.data.get("id")
            if item.name == "approval_requested" and isinstance(approval_id, str):
                task = asyncio.get_running_loop().create_task(self._ask(approval_id))
                self._asking.add(task)
                task.add_done_callback(self._asking.discard)
            return False  # nothing is queued on the bus

        self._subscription = self.bus.subscribe("events", agent=self.agent, accept=seen)

    def stop(self) -> None:
        if self._subscription is not None:
            self.bus.unsubscribe(self._subscription)
        for task in self._asking:
            task.cancel()
        for approval_id in list(self.session.asked):
            if approval_id.startswith("approval-"):
                self.session.asked.pop(approval_id).cancel()

    async def _ask(self, approval_id: str) -> None:
        request = self.gate.projection.get(approval_id)
        session = self.session
        if request is None or not may_decide(request, session.caller, session.groups):
            return  # decided already (by policy, say), or this token's say would not count
        try:
            answer = session.ask(f"approval-{approval_id}")
        except SessionLimitError:
            return
        self.notices.send(elicitation(approval_id, request))
        try:
            reply = await asyncio.wait_for(answer, max(1, request.timeout_secs))
        except (TimeoutError, asyncio.CancelledError):
            return
        finally:
            session.asked.pop(f"approval-{approval_id}", None)
        decided = decision_of(reply)
        if decided is None:
            return
        decision, reason = decided
        try:
            await self.gate.decide(
                approval_id,
                decision,
                session.caller,
                request_hash=request.request_hash or None,
                reason=reason,
                groups=session.groups,
            )
        except Problem as e:  # decided meanwhile elsewhere, abandoned, or refused (403)
            log.info("MCP elicitation of %s not counted: %s", approval_id, e.detail)
            return
        with contextlib.suppress(Problem):  # a placed agent's decision: journaled already
            await confirmed(self.app, [request.agent])
