"""Approval notifications: what the operator's channels are told, and how it is sent.

A request that waits for people (pending once folded: a request a policy decided in the same
write never is) is announced to every channel whose `on` has `requested` and whose filters
match (its agents, capabilities and approver groups: a channel with `groups` hears of the
requests whose approvers name one of them); an `escalated` notice goes out
`escalate_before_secs` before its timeout (at most half of the timeout) if it still waits, and,
for channels whose `on` asks for them, a follow-up once it is `decided`, `expired` or
`abandoned`, so a chat thread can be closed. What is said is bounded and shows control
characters as escapes: the agent's name, the capability, the request's one-line summary (never
the request itself), why people are asked (the policy's reason), who must approve ("1, 1 from
finance") and how far it is, who asked (the task's caller), when it expires, how it ended, and a
link to it in the console, which asks for a token like every page of the console: a
notification never carries a secret nor a link that decides anything.

Webhook channels get a signed JSON POST (Standard Webhooks); Apprise channels a title and a
plain-text body through the Apprise URL (chat, mail, ...).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from urllib.parse import quote

import msgspec

from node.config.model import ChannelConfig, Config
from node.display.humanize import visible
from node.display.request_summary import elide
from node.policy.approvers import Approver, describe, progress
from projections.approvals import ApprovalRequest, Resolution

MAX_SUMMARY = 500
MAX_TITLE = 200
REQUESTED, ESCALATED = "requested", "escalated"
DECIDED, EXPIRED, ABANDONED = "decided", "expired", "abandoned"
BUDGET = "budget"  # an inference budget crossed 80 % or 100 % (node/inference/notices.py)
# a resolution's outcome → the follow-up event a channel may ask for
FOLLOW_UPS = {"approve": DECIDED, "deny": DECIDED, "timeout": EXPIRED, "abandoned": ABANDONED}
logging.getLogger("apprise").setLevel(logging.CRITICAL)  # its messages may quote a URL


class Notice(msgspec.Struct, kw_only=True):
    """The data of one approval notification (a webhook's `data`)."""

    id: str
    agent: str
    capability: str
    summary: str
    requested_at: str
    expires_at: str
    timeout_secs: int
    task: str | None
    node: str
    console_url: str
    reason: str | None = None  # why people are asked (the policy's reason), when one says
    approvers: str | None = None  # who must approve: "1, 1 from finance" (None: any one)
    progress: str | None = None  # "1 of 2, waiting for finance"
    caller: str | None = None  # who asked: the token (or agent) that created the task
    outcome: str | None = None  # a follow-up's: approve, deny, timeout, abandoned
    decided_by: str | None = None  # a follow-up's: the operator or policy that decided
    why: str | None = None  # a follow-up's: the decision's reason


class BudgetNotice(msgspec.Struct, kw_only=True):
    """The data of one budget notification: which budget, how far, whose call took it there."""

    title: str
    detail: str
    agent: str
    severity: str
    node: str
    console_url: str


class Channels:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.channels = config.notifications.channels
        base = config.notifications.console_url or f"{config.public_url}/console/"
        self.console = base if base.endswith("/") else base + "/"
        self.escalate_before = config.notifications.escalate_before_secs

    def matching(self, request: ApprovalRequest) -> list[ChannelConfig]:
        groups = {slot.group for slot in request.approvers or () if slot.group}
        return [
            ch
            for ch in self.channels
            if (not ch.agents or request.agent in ch.agents)
            and (not ch.capabilities or request.capability in ch.capabilities)
            and (not ch.groups or not groups.isdisjoint(ch.groups))
        ]

    def hearing_budgets(self, agent: str) -> list[ChannelConfig]:
        """The channels told of inference budgets: `budget` in their `on`, their agents
        (if any) naming the agent whose call crossed, their capabilities (if any) naming
        inference; a channel kept to approver groups hears of no budget."""
        return [
            ch
            for ch in self.channels
            if BUDGET in ch.on
            and (not ch.agents or agent in ch.agents)
            and (not ch.capabilities or "inference" in ch.capabilities)
            and not ch.groups
        ]

    def budget_notice(self, title: str, detail: str, agent: str, severity: str) -> BudgetNotice:
        return BudgetNotice(
            title=visible(elide(title, MAX_TITLE)),
            detail=visible(elide(detail, MAX_SUMMARY)),
            agent=agent,
            severity=severity,
            node=self.config.node.name,
            console_url=f"{self.console}#/usage",
        )

    def escalation_at(self, request: ApprovalRequest) -> float:
        """When an escalation goes out (epoch seconds): `escalate_before_secs` before the
        request expires, or half-way when its timeout is shorter than twice that."""
        expires = epoch(request.expires_at)
        before = min(float(self.escalate_before), request.timeout_secs / 2)
        return expires - before

    def notice(self, request: ApprovalRequest, caller: str | None = None) -> Notice:
        slots = request.approvers or ()
        given = [Approver(e.operator, frozenset(e.groups)) for e in request.endorsements or ()]
        reason = request.policy.reason if request.policy else None
        return Notice(
            reason=_shown(reason),
            approvers=describe(slots) if slots else None,
            progress=progress(slots, given).text if slots else None,
            caller=_shown(caller),
            id=request.id,
            agent=request.agent,
            capability=visible(elide(request.capability, MAX_TITLE)),
            summary=visible(elide(request.detail, MAX_SUMMARY)),
            requested_at=request.requested_at,
            expires_at=request.expires_at,
            timeout_secs=request.timeout_secs,
            task=request.task,
            node=self.config.node.name,
            console_url=f"{self.console}#/inbox/{quote(request.id, safe='')}",
        )

    def follow_up(self, notice: Notice, resolution: Resolution) -> Notice:
        """The request's notice as it ended: how, by whom, why."""
        return msgspec.structs.replace(
            notice,
            outcome=resolution.outcome,
            decided_by=_shown(resolution.operator),
            why=_shown(resolution.reason),
        )


def _shown(text: str | None) -> str | None:
    return visible(elide(text, MAX_SUMMARY)) if text else None


def webhook_body(event: str, notice: Notice, at: str) -> bytes:
    """Standard Webhooks' recommended shape: {type, timestamp, data}."""
    return msgspec.json.encode({"type": f"approval.{event}", "timestamp": at, "data": notice})


def budget_body(kind: str, notice: BudgetNotice, at: str) -> bytes:
    if kind == "webhook":
        return msgspec.json.encode({"type": "inference.budget", "timestamp": at, "data": notice})
    title = visible(elide(f"[{notice.node}] {notice.title}", MAX_TITLE))
    body = f"{notice.detail}\nUsage in the console (sign-in needed): {notice.console_url}"
    return msgspec.json.encode(ChatMessage(title, body))


class ChatMessage(msgspec.Struct):
    title: str
    body: str


_ENDED = {
    "approve": "approved",
    "deny": "denied",
    "timeout": "expired undecided",
    "abandoned": "abandoned",
}


def chat_body(event: str, notice: Notice) -> bytes:
    if notice.outcome is not None:
        what = _ENDED.get(notice.outcome, notice.outcome)
    else:
        what = "still waits, expires soon" if event == ESCALATED else "waits for an approver"
    title = visible(elide(f"[{notice.node}] {notice.agent}: {notice.capability} {what}", MAX_TITLE))
    lines = [
        f"Agent {notice.agent} asks for {notice.capability}"
        + (f", for {notice.caller}." if notice.caller else "."),
        f"Request: {notice.summary}",
    ]
    if notice.reason:
        lines.append(f"Why people are asked: {notice.reason}")
    if notice.approvers:
        lines.append(f"Approvers: {notice.approvers} ({notice.progress})")
    if notice.outcome is not None:
        by = f" by {notice.decided_by}" if notice.decided_by else ""
        lines.append(f"Ended: {what}{by}" + (f": {notice.why}" if notice.why else ""))
        lines.append(f"In the console (sign-in needed): {notice.console_url}")
    else:
        lines.append(f"Expires: {notice.expires_at}")
        lines.append(f"Decide in the console (sign-in needed): {notice.console_url}")
    return msgspec.json.encode(ChatMessage(title, "\n".join(lines)))


_chat = msgspec.json.Decoder(ChatMessage)


async def send_apprise(url: str, body: bytes, timeout: float) -> tuple[bool, str]:
    """One Apprise notification; (ok, a reason without the URL when it failed)."""
    import apprise  # imported on first use: it is large, and most nodes have no such channel

    message = _chat.decode(body)
    sender = apprise.Apprise()
    if not sender.add(url):
        return False, "the Apprise URL is not one Apprise knows"
    try:
        result = await asyncio.wait_for(
            sender.async_notify(
                body=message.body,
                title=message.title,
                body_format=apprise.NotifyFormat.TEXT,
            ),
            timeout,
        )
    except TimeoutError:
        return False, f"no answer within {timeout:g} s"
    if bool(result):
        return True, ""
    status = getattr(getattr(result, "status", None), "name", "FAILURE")
    return False, f"Apprise: {str(status).lower()}"


def epoch(timestamp: str, fallback: float = 0.0) -> float:
    """An ISO timestamp of the journal in epoch seconds (`fallback` if it does not parse)."""
    try:
        return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return fallback
