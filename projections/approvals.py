"""Approval requests: pending ones (listed and grouped) and how each resolved one ended.

A request carries the exact text that will be performed once approved (`request`) and its
`request_hash` (`sha256:` + hex of the UTF-8 text), which decisions bind to; `detail` is a
one-line summary kept for the spec's list. Requests journaled before `request` existed show
an empty `request` and hash: they can still be decided, never adopted after a restart.

A request is pending from `approval.requested` until the first `approval.decided` or
`approval.timed_out` for its id in the same journal; later resolutions of the same id are
ignored, so the fold is deterministic whatever a damaged or replicated journal holds.
"""

from __future__ import annotations

import builtins
import hashlib
from datetime import datetime, timedelta
from typing import Any, Literal

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
    request: str = ""
    request_hash: str = ""
    task: str | None = None  # the task whose run asked, when a task's run asked


def hash_request(request: str) -> str:
    """What a decision binds to: `sha256:` and the hex digest of the request's UTF-8 text."""
    return "sha256:" + hashlib.sha256(request.encode("utf-8", "surrogatepass")).hexdigest()


class Resolution(msgspec.Struct, frozen=True):
    """How a request ended: `approve`, `deny` or `timeout`, when, and by whom."""

    id: str
    agent: str
    outcome: str
    at: str
    operator: str | None = None
    reason: str | None = None  # why the node decided by itself (a canceled task)


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
            if asked.request_hash != hash_request(asked.request):
                # absent or inconsistent: nothing to bind a decision to
                asked = msgspec.structs.replace(asked, request="", request_hash="")
            request = ApprovalRequest(
                id=approval_id,
                agent=envelope.stream,
                capability=asked.capability,
                detail=asked.detail,
                requested_at=ts,
                timeout_secs=asked.timeout_secs,
                expires_at=expiry_of(ts, asked.timeout_secs),
                request=asked.request,
                request_hash=asked.request_hash,
                task=asked.task,
            )
            self.pending[approval_id] = request
            self._groups.setdefault((request.agent, request.capability), {})[approval_id] = None
        elif kind in (c.APPROVAL_DECIDED, c.APPROVAL_TIMED_OUT):
            open_request = self.pending.get(approval_id)
            if open_request is None or open_request.agent != envelope.stream:
                return
            outcome: Literal["approve", "deny", "timeout"]
            operator: str | None
            reason: str | None
            if kind == c.APPROVAL_DECIDED:
                decided = c.read(c.ApprovalDecided, data)
                if decided is None:
                    return
                outcome, operator, reason = decided.decision, decided.operator, decided.reason
            else:
                outcome, operator, reason = "timeout", None, None
            del self.pending[approval_id]
            key = (open_request.agent, open_request.capability)
            group = self._groups[key]
            del group[approval_id]
            if not group:
                del self._groups[key]
            self.resolved[approval_id] = Resolution(
                approval_id, open_request.agent, outcome, envelope.event.ts, operator, reason
            )

    @property
    def count(self) -> int:
        return len(self.pending)

    def get(self, approval_id: str) -> ApprovalRequest | None:
        return self.pending.get(approval_id)

    def pending_for_task(self, agent: str, task_id: str) -> list[str]:
        """Ids of the agent's pending requests asked by that task's run."""
        return [r.id for r in self.pending.values() if r.agent == agent and r.task == task_id]

    def list(self) -> builtins.list[ApprovalRequest]:
        """Pending requests, oldest first."""
        return list(self.pending.values())

    def groups(self) -> builtins.list[Group]:
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
