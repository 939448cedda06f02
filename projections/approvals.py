"""Approval requests: pending ones (listed and grouped) and how each resolved one ended.

A request carries the exact text that will be performed once approved (`request`) and its
`request_hash` (`sha256:` + hex of the UTF-8 text), which decisions bind to; `detail` is a
one-line summary kept for the spec's list. Requests journaled before `request` existed show
an empty `request` and hash: they can still be decided, never adopted after a restart.

A request is pending from `approval.requested` until the first `approval.decided` or
`approval.timed_out` for its id in the same journal; later resolutions of the same id are
ignored, so the fold is deterministic whatever a damaged or replicated journal holds.

On disk (projections/disk.py), since resolutions pile up with history; one model, so pending
and resolved change in the same transaction. Databases (`rm.approvals.<db>`):
  pending         id → (position of its request, ApprovalRequest)
  pending_order   u64(position) → id: the pending ones oldest first
  resolved        id → Resolution
  resolved_order  u64(position of the resolution) → id: the history, one reverse walk
  groups          (agent, capability) → (position that opened the group, pending count):
                  so groups keep their order while they stay non-empty, as they always did
  charges         the budgets' ledgers (projections/ledger.py): what policies permitted
                  under each budget (docs/approvals.md), per agent or shared by a group of
                  agents or the node, as the charge's `scope` says
Ids and group keys longer than an LMDB key are stored under a digest (`_key`).

A request that needs several approvers (`approvers`) collects `approval.endorsed` events on the
pending entry, one per distinct operator (a second from the same token changes nothing); the
gate journals the decision with the one that completes the count.
"""

from __future__ import annotations

import builtins
import hashlib
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Literal, NamedTuple

import msgspec
from msgspec import UNSET, UnsetType

from eventstore.envelope import Envelope
from projections import catalogue as c
from projections.disk import Space, Txn, key_of, u64
from projections.ledger import Ledger, ledger_key
from projections.states import ApprovalChanged, ApprovalState, approval_resolved

DEFAULT_TIMEOUT_SECS = 300
APPROVAL_EVENTS = frozenset(
    {
        c.APPROVAL_REQUESTED,
        c.APPROVAL_DECIDED,
        c.APPROVAL_TIMED_OUT,
        c.APPROVAL_ABANDONED,
        c.APPROVAL_ENDORSED,
    }
)


class Endorsement(msgspec.Struct, frozen=True):
    """One approver's approval of a request that needs several: who, and their groups then."""

    operator: str
    groups: list[str] = []
    at: str = ""


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
    # a decision made while no running call waited (`approval.decided` `later`): it applies
    # when the agent asks for exactly this again
    recorded: str | None = None
    recorded_by: str | None = None
    recorded_reason: str | None = None
    # the policies that asked people and why (issue 47), the approvers it needs (absent: one)
    # and the distinct ones who approved so far; each left out where it has nothing to say
    policy: c.PolicyRef | UnsetType = UNSET
    approvers: tuple[c.ApproverSlot, ...] | UnsetType = UNSET
    endorsements: tuple[Endorsement, ...] | UnsetType = UNSET


Outcome = Literal["approve", "deny", "timeout"]


class Verdict(NamedTuple):
    """How a request ended, as the agent is told: the outcome, who decided, and why."""

    outcome: Outcome
    operator: str | None = None
    reason: str | None = None


def hash_request(request: str) -> str:
    """What a decision binds to: `sha256:` and the hex digest of the request's UTF-8 text."""
    return "sha256:" + hashlib.sha256(request.encode("utf-8", "surrogatepass")).hexdigest()


class Resolution(msgspec.Struct, frozen=True):
    """How a request ended: `approve`, `deny` or `timeout`, when, by whom, and what it was."""

    id: str
    agent: str
    outcome: str
    at: str
    operator: str | None = None
    # why: the operator's reason for a denial, or the node's when it decided by itself
    reason: str | None = None
    capability: str = ""  # what was asked, as the request said (its one-line `detail`)
    detail: str = ""
    # decided by the policy set: which policies of which set, and why (issue 47); every
    # distinct approver, when it needed more than one (each left out where it does not apply)
    policy: c.PolicyRef | UnsetType = UNSET
    approvers: builtins.list[str] | UnsetType = UNSET


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


_encode = msgspec.msgpack.Encoder().encode
_decode_pending = msgspec.msgpack.Decoder(tuple[int, ApprovalRequest]).decode
_decode_resolution = msgspec.msgpack.Decoder(Resolution).decode
_decode_group = msgspec.msgpack.Decoder(tuple[int, int]).decode


def budget_key(agent: str, capability: str, budget: str, scope: str = "") -> bytes:
    """The ledger of one policy's budget: the agent's own, or the scope's (`group:<name>`,
    `node:<name>`) shared by the agents it names."""
    return ledger_key(agent, scope, capability, budget)


def _micros(ts: str) -> int:
    """An event's `ts` as µs since the epoch (0 when it does not parse: never in a window)."""
    try:
        moment = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return 0
    if moment.tzinfo is None:
        return 0
    return max(0, int(moment.timestamp() * 1_000_000))


def _text(value: str) -> bytes:
    return value.encode("utf-8", "surrogatepass")


def _stored(raw: bytes | memoryview | None) -> bytes | memoryview:
    """A value an index names: there, since the databases change in the same transaction."""
    if raw is None:
        raise LookupError("an approvals index names a missing entry")
    return raw


def _id_key(approval_id: str) -> bytes:
    return key_of(approval_id)


def _group_key(agent: str, capability: str) -> bytes:
    return key_of(_encode((agent, capability)))


class Approvals:
    name = "approvals"
    handles = APPROVAL_EVENTS
    space: Space

    def bind(self, space: Space) -> None:
        self.space = space
        self._pending = space.db(self.name, "pending")
        self._pending_order = space.db(self.name, "pending_order")
        self._resolved = space.db(self.name, "resolved")
        self._resolved_order = space.db(self.name, "resolved_order")
        self._groups = space.db(self.name, "groups")
        self._charges = space.db(self.name, "charges")
        self.ledger = Ledger(self._charges)

    # ------------------------------------------------------------------ fold
    def fold(self, txn: Txn, envelope: Envelope) -> ApprovalChanged | None:
        """The approval's transition (projections/states.py), or None when the event changed
        nothing. In the node the tasks read model calls it, as the part of the one state
        machine that keeps the approvals' own tables."""
        kind = envelope.event.type
        if kind not in APPROVAL_EVENTS:
            return None
        approval_id = envelope.event.data.get("id")
        if not isinstance(approval_id, str):
            return None
        if kind == c.APPROVAL_REQUESTED:
            return self._requested(txn, envelope, approval_id)
        if kind == c.APPROVAL_ENDORSED:
            return self._endorsed(txn, envelope, approval_id)
        return self._resolved_by(txn, envelope, approval_id)

    def _requested(self, txn: Txn, envelope: Envelope, approval_id: str) -> ApprovalChanged | None:
        key = _id_key(approval_id)
        if (
            txn.get(key, db=self._pending) is not None
            or txn.get(key, db=self._resolved) is not None
        ):
            return None
        asked = c.read(c.ApprovalRequested, envelope.event.data)  # rare events: read them whole
        if asked is None:
            return None
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
            policy=asked.policy or UNSET,
            approvers=tuple(asked.approvers) if asked.approvers else UNSET,
        )
        position = envelope.position
        txn.put(key, _encode((position, request)), db=self._pending)
        txn.put(u64(position), _text(approval_id), db=self._pending_order)
        group = _group_key(request.agent, request.capability)
        raw = txn.get(group, db=self._groups)
        opened, count = _decode_group(raw) if raw is not None else (position, 0)
        txn.put(group, _encode((opened, count + 1)), db=self._groups)
        return ApprovalChanged(
            approval=approval_id,
            agent=request.agent,
            task=None,
            before=None,
            after=ApprovalState.PENDING,
            position=position,
        )

    def _resolved_by(
        self, txn: Txn, envelope: Envelope, approval_id: str
    ) -> ApprovalChanged | None:
        key = _id_key(approval_id)
        raw = txn.get(key, db=self._pending)
        if raw is None:
            return None
        position, open_request = _decode_pending(raw)
        if open_request.agent != envelope.stream:
            return None
        outcome: str
        operator: str | None
        reason: str | None
        policy: c.PolicyRef | UnsetType = UNSET
        approvers: builtins.list[str] | UnsetType = UNSET
        payload = c.payload_of(envelope)
        if isinstance(payload, c.ApprovalDecided):
            if payload.later:
                return self._recorded(txn, key, position, open_request, payload, envelope)
            outcome, operator, reason = payload.decision, payload.operator, payload.reason
            policy, approvers = payload.policy or UNSET, payload.approvers or UNSET
        elif isinstance(payload, c.ApprovalAbandoned):
            outcome, operator, reason = "abandoned", None, payload.reason
        elif isinstance(payload, c.ApprovalTimedOut):
            outcome, operator, reason = "timeout", None, None
        else:
            return None
        after = approval_resolved(ApprovalState.PENDING, outcome)
        if after is None:
            return None
        txn.delete(key, db=self._pending)
        txn.delete(u64(position), db=self._pending_order)
        group = _group_key(open_request.agent, open_request.capability)
        opened, count = _decode_group(_stored(txn.get(group, db=self._groups)))
        if count > 1:
            txn.put(group, _encode((opened, count - 1)), db=self._groups)
        else:
            txn.delete(group, db=self._groups)
        resolution = Resolution(
            approval_id,
            open_request.agent,
            outcome,
            envelope.event.ts,
            operator,
            reason,
            open_request.capability,
            open_request.detail,
            policy,
            approvers,
        )
        txn.put(key, _encode(resolution), db=self._resolved)
        txn.put(u64(envelope.position), _text(approval_id), db=self._resolved_order)
        if isinstance(payload, c.ApprovalDecided) and payload.charges and outcome == "approve":
            self._charge(txn, open_request, payload.charges, envelope)
        return ApprovalChanged(
            approval=approval_id,
            agent=open_request.agent,
            task=None,
            before=ApprovalState.PENDING,
            after=after,
            position=envelope.position,
        )

    def _recorded(
        self,
        txn: Txn,
        key: bytes,
        position: int,
        request: ApprovalRequest,
        decided: c.ApprovalDecided,
        envelope: Envelope,
    ) -> ApprovalChanged:
        """A decision for later: kept on the request, which stays pending (the newest holds)."""
        request = msgspec.structs.replace(
            request,
            recorded=decided.decision,
            recorded_by=decided.operator,
            recorded_reason=decided.reason,
        )
        txn.put(key, _encode((position, request)), db=self._pending)
        return ApprovalChanged(
            approval=request.id,
            agent=request.agent,
            task=None,
            before=ApprovalState.PENDING,
            after=ApprovalState.PENDING,
            position=envelope.position,
            recorded=decided.decision,
        )

    def _endorsed(self, txn: Txn, envelope: Envelope, approval_id: str) -> ApprovalChanged | None:
        """One more distinct approver on a pending request; the request stays pending."""
        key = _id_key(approval_id)
        raw = txn.get(key, db=self._pending)
        if raw is None:
            return None
        position, request = _decode_pending(raw)
        endorsed = c.read(c.ApprovalEndorsed, envelope.event.data)
        given = request.endorsements or ()
        if (
            endorsed is None
            or request.agent != envelope.stream
            or len(given) >= c.MAX_APPROVERS  # more can never count: a hostile journal's
            or any(e.operator == endorsed.operator for e in given)
        ):
            return None
        endorsement = Endorsement(endorsed.operator, list(endorsed.groups), envelope.event.ts)
        request = msgspec.structs.replace(request, endorsements=(*given, endorsement))
        txn.put(key, _encode((position, request)), db=self._pending)
        return ApprovalChanged(
            approval=approval_id,
            agent=request.agent,
            task=None,
            before=ApprovalState.PENDING,
            after=ApprovalState.PENDING,
            position=envelope.position,
        )

    # ------------------------------------------------------------------ budgets
    def _charge(
        self,
        txn: Txn,
        request: ApprovalRequest,
        charges: builtins.list[c.BudgetCharge],
        envelope: Envelope,
    ) -> None:
        moment = _micros(envelope.event.ts)
        for charge in charges:
            ledger = budget_key(request.agent, request.capability, charge.budget, charge.scope)
            self.ledger.charge(txn, ledger, moment, envelope.position, Decimal(charge.amount))

    def spent(
        self,
        agent: str,
        capability: str,
        budget: str,
        since_micros: int,
        through: int,
        scope: str = "",
    ) -> Decimal:
        """What policy `budget` permitted the agent's capability (or, with a `scope`, every
        agent's it names) since then, summed over the charges at positions up to `through`
        (what the node's readers have been handed: the gate counts later ones itself,
        node/policy/budgets.py)."""
        with self.space.read() as txn:
            ledger = budget_key(agent, capability, budget, scope)
            return self.ledger.spent(txn, ledger, since_micros, through)

    # ------------------------------------------------------------------ pending
    @property
    def count(self) -> int:
        """Pending requests (the `approvals_pending` gauge): LMDB's own count, no walk."""
        with self.space.read() as txn:
            return int(txn.stat(self._pending)["entries"])

    def get(self, approval_id: str) -> ApprovalRequest | None:
        """The pending request with that id (None once resolved)."""
        with self.space.read() as txn:
            raw = txn.get(_id_key(approval_id), db=self._pending)
        return _decode_pending(raw)[1] if raw is not None else None

    def is_pending(self, approval_id: str) -> bool:
        with self.space.read() as txn:
            return txn.get(_id_key(approval_id), db=self._pending) is not None

    def list(self) -> builtins.list[ApprovalRequest]:
        """Pending requests, oldest first."""
        with self.space.read() as txn:
            return self._pending_in_order(txn)

    def groups(self) -> builtins.list[Group]:
        """Pending requests grouped by (agent, capability), groups in the order they opened
        (a group emptied and opened again comes last), ids oldest first."""
        with self.space.read() as txn:
            members: dict[tuple[str, str], builtins.list[str]] = {}
            for request in self._pending_in_order(txn):
                members.setdefault((request.agent, request.capability), []).append(request.id)
            opened = {
                pair: _decode_group(_stored(txn.get(_group_key(*pair), db=self._groups)))[0]
                for pair in members
            }
        return [
            Group(agent, capability, len(members[agent, capability]), members[agent, capability])
            for agent, capability in sorted(members, key=opened.__getitem__)
        ]

    def _pending_in_order(self, txn: Txn) -> builtins.list[ApprovalRequest]:
        return [
            _decode_pending(_stored(txn.get(key_of(raw_id), db=self._pending)))[1]
            for _, raw_id in txn.cursor(self._pending_order)
        ]

    # ------------------------------------------------------------------ resolved
    def resolution(self, approval_id: str) -> Resolution | None:
        """How the request with that id ended (None while pending or unknown)."""
        with self.space.read() as txn:
            raw = txn.get(_id_key(approval_id), db=self._resolved)
        return _decode_resolution(raw) if raw is not None else None

    def decided_at_once(self, approval_id: str) -> bool:
        """Decided by the policy set in the request's own write: it never waited for anyone,
        so a stream shows no input-required or interrupt for it (docs/approvals.md)."""
        resolution = self.resolution(approval_id)
        return resolution is not None and bool(resolution.policy)

    def is_resolved(self, approval_id: str) -> bool:
        with self.space.read() as txn:
            return txn.get(_id_key(approval_id), db=self._resolved) is not None

    def history(self, limit: int) -> builtins.list[Resolution]:
        """The newest `limit` resolutions, newest first: one reverse walk, whatever the
        history's length."""
        found: builtins.list[Resolution] = []
        if limit <= 0:
            return found
        with self.space.read() as txn:
            for _, raw_id in txn.cursor(self._resolved_order).iterprev():
                found.append(
                    _decode_resolution(_stored(txn.get(key_of(raw_id), db=self._resolved)))
                )
                if len(found) >= limit:
                    break
        return found

    def snapshot(self) -> dict[str, Any]:
        with self.space.read() as txn:
            pending = self._pending_in_order(txn)
            resolved = [_decode_resolution(raw) for _, raw in txn.cursor(self._resolved)]
        return {
            "pending": [msgspec.to_builtins(r) for r in pending],
            "resolved": {
                r.id: msgspec.to_builtins(r) for r in sorted(resolved, key=lambda r: r.id)
            },
            "groups": [msgspec.to_builtins(g) for g in self.groups()],
        }
