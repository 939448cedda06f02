"""Approval requests: pending ones (listed and grouped) and how each resolved one ended.

A request is pending from `approval.requested` until the first `approval.decided` or
`approval.timed_out` for its id in the same journal; later resolutions of the same id are
ignored, so the fold is deterministic whatever a damaged or replicated journal holds.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import msgspec

from eventstore.envelope import Envelope
from projections import catalogue as c

DEFAULT_TIMEOUT_SECS = 300
APPROVAL_EVENTS = frozenset({c.APPROVAL_REQUESTED, c.APPROVAL_DECIDED, c.APPROVAL_TIMED_OUT})


class ApprovalRequest(msgspec.Struct, frozen=True):
    """An element of GET /api/v1/approvals: the spec's fields plus the timeout and its end."""

    id: str
    agent: str
    capability: str
    detail: str
    requested_at: str
    timeout_secs: int
    expires_at: str


class Resolution(msgspec.Struct, frozen=True):
    """How a request ended: `approve`, `deny` or `timeout`, when, and by whom."""

    id: str
    agent: str
    outcome: str
    at: str
    operator: str | None = None


class Group(msgspec.Struct, frozen=True):
    agent: str
    capability: str
    count: int
    ids: list[str]


def expiry_of(requested_at: str, timeout_secs: int) -> str:
    """`requested_at` + timeout in the journal's own timestamp format (as is if unparsable)."""
    try:
        start = datetime.fromisoformat(requested_at.replace("Z", "+00:00"))
        end = start + timedelta(seconds=timeout_secs)
    except (ValueError, OverflowError):  # beyond year 9999: the catalogue keeps peers' out
        return requested_at
    return end.isoformat(timespec="microseconds").replace("+00:00", "Z")


class Approvals:
    name = "approvals"
    handles = APPROVAL_EVENTS

    def __init__(self) -> None:
        self.pending: dict[str, ApprovalRequest] = {}
        self.resolved: dict[str, Resolution] = {}
        # (agent, capability) → ids in request order; a dict so removal is O(1)
        self._groups: dict[tuple[str, str], dict[str, None]] = {}

    def apply(self, envelope: Envelope) -> None:
        kind = envelope.event.type
        if not kind.startswith("approval."):
            return
        data = envelope.event.data
        approval_id = data.get("id")
        if not isinstance(approval_id, str):
            return
        if kind == c.APPROVAL_REQUESTED:
            if approval_id in self.pending or approval_id in self.resolved:
                return
            asked = c.read(c.ApprovalRequested, data)  # rare events: read them whole
            if asked is None:
                return
            ts = envelope.event.ts
            request = ApprovalRequest(
                id=approval_id,
                agent=envelope.stream,
                capability=asked.capability,
                detail=asked.detail,
                requested_at=ts,
                timeout_secs=asked.timeout_secs,
                expires_at=expiry_of(ts, asked.timeout_secs),
            )
            self.pending[approval_id] = request
            self._groups.setdefault((request.agent, request.capability), {})[approval_id] = None
        elif kind in (c.APPROVAL_DECIDED, c.APPROVAL_TIMED_OUT):
            request = self.pending.get(approval_id)
            if request is None or request.agent != envelope.stream:
                return
            if kind == c.APPROVAL_DECIDED:
                decided = c.read(c.ApprovalDecided, data)
                if decided is None:
                    return
                outcome, operator = decided.decision, decided.operator
            else:
                outcome, operator = "timeout", None
            del self.pending[approval_id]
            key = (request.agent, request.capability)
            group = self._groups[key]
            del group[approval_id]
            if not group:
                del self._groups[key]
            self.resolved[approval_id] = Resolution(
                approval_id, request.agent, outcome, envelope.event.ts, operator
            )

    @property
    def count(self) -> int:
        return len(self.pending)

    def get(self, approval_id: str) -> ApprovalRequest | None:
        return self.pending.get(approval_id)

    def list(self) -> list[ApprovalRequest]:
        """Pending requests, oldest first."""
        return list(self.pending.values())

    def groups(self) -> list[Group]:
        """Pending requests grouped by (agent, capability), groups in order of first request."""
        return [
            Group(agent, capability, len(ids), list(ids))
            for (agent, capability), ids in self._groups.items()
        ]

    def snapshot(self) -> dict[str, Any]:
        return {
            "pending": [msgspec.to_builtins(r) for r in self.pending.values()],
            "resolved": {k: msgspec.to_builtins(v) for k, v in sorted(self.resolved.items())},
            "groups": [msgspec.to_builtins(g) for g in self.groups()],
        }
