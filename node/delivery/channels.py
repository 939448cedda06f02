"""Approval notifications: what the operator's channels are told, and how it is sent.

A request that waits for people (pending once folded: a request a policy decided in the same
write never is) is announced to every channel whose `on` has `requested` and whose filters
match; an `escalated` notice goes out `escalate_before_secs` before its timeout (at most half
of the timeout) if it still waits. What is said is bounded and shows control characters as
escapes: the agent's name, the capability, the request's one-line summary (never the request
itself), when it expires, and a link to it in the console, which asks for a token like every
page of the console: a notification never carries a secret nor a link that decides anything.

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
from projections.approvals import ApprovalRequest

MAX_SUMMARY = 500
MAX_TITLE = 200
REQUESTED, ESCALATED = "requested", "escalated"
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


class Channels:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.channels = config.notifications.channels
        base = config.notifications.console_url or f"{config.public_url}/console/"
        self.console = base if base.endswith("/") else base + "/"
        self.escalate_before = config.notifications.escalate_before_secs

    def matching(self, request: ApprovalRequest) -> list[ChannelConfig]:
        return [
            ch
            for ch in self.channels
            if (not ch.agents or request.agent in ch.agents)
            and (not ch.capabilities or request.capability in ch.capabilities)
        ]

    def escalation_at(self, request: ApprovalRequest) -> float:
        """When an escalation goes out (epoch seconds): `escalate_before_secs` before the
        request expires, or half-way when its timeout is shorter than twice that."""
        expires = epoch(request.expires_at)
        before = min(float(self.escalate_before), request.timeout_secs / 2)
        return expires - before

    def notice(self, request: ApprovalRequest) -> Notice:
        return Notice(
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


def webhook_body(event: str, notice: Notice, at: str) -> bytes:
    """Standard Webhooks' recommended shape: {type, timestamp, data}."""
    return msgspec.json.encode({"type": f"approval.{event}", "timestamp": at, "data": notice})


class ChatMessage(msgspec.Struct):
    title: str
    body: str


def chat_body(event: str, notice: Notice) -> bytes:
    what = "still waits, expires soon" if event == ESCALATED else "waits for an approver"
    title = visible(elide(f"[{notice.node}] {notice.agent}: {notice.capability} {what}", MAX_TITLE))
    lines = [
        f"Agent {notice.agent} asks for {notice.capability}.",
        f"Request: {notice.summary}",
        f"Expires: {notice.expires_at}",
        f"Decide in the console (sign-in needed): {notice.console_url}",
    ]
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
