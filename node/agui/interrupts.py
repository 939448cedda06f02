"""An approval request as AG-UI 1.0's interrupt: what the operator is asked, and until when."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from projections import catalogue as c


def interrupt_of(
    agent: str, asked: c.ApprovalRequested, ts: str, open_tool: str | None
) -> dict[str, Any]:
    interrupt: dict[str, Any] = {
        "id": asked.id,
        "reason": "approval",
        "message": _approval_message(asked),
        "metadata": {"capability": asked.capability, "agent": agent},
    }
    if asked.request and asked.request_hash:
        interrupt["metadata"] |= {"request": asked.request, "requestHash": asked.request_hash}
    if open_tool is not None:
        interrupt["toolCallId"] = open_tool
    expires = _expiry(ts, asked.timeout_secs)
    if expires:
        interrupt["expiresAt"] = expires
    return interrupt


def _approval_message(asked: c.ApprovalRequested) -> str:
    """What the operator is asked: the full request the agent will perform."""
    if asked.request:
        return f"approve {asked.capability}: {asked.request}"
    return asked.detail or f"approve {asked.capability}"


def _expiry(ts: str, timeout_secs: Any) -> str | None:
    if not isinstance(timeout_secs, int | float):
        return None
    try:
        start = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return None
    at = start.astimezone(UTC) + timedelta(seconds=timeout_secs)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
