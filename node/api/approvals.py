"""Approvals: GET the pending list and its groups, POST a decision singly or in a batch."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Literal

import msgspec
from aiohttp import web
from msgspec import UNSET, UnsetType

from node.context import CONTEXT
from node.display.humanize import first_invisible, visible
from node.placement.key import confirmed
from node.policy.approvers import Approver, progress
from node.services.approval_decisions import Decision, progress_view
from node.services.approvals import APPROVALS, ApprovalGate
from node.web.auth import IDENTITY
from node.web.body import json_body
from node.web.http import json_response, page_bytes
from node.web.pages import CURSOR, PAGED, page_response
from node.web.routes import Doc, add_route
from projections.approvals import ApprovalRequest, Approvals, Group

ApprovalId = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]


class Batched(msgspec.Struct):
    groups: list[Group]


class ApprovalProgress(msgspec.Struct):
    """A request that needs several approvers: how many, who approved, what is missing, and
    all of it in words ("1 of 2, waiting for finance")."""

    needed: int
    approved_by: list[str]
    waiting_for: list[str]
    progress: str


class DecisionResult(msgspec.Struct, omit_defaults=True):
    id: str
    decision: Decision
    decided_at: str
    # "now": a running call waited and goes on with it; "later": the request is orphaned (the
    # agent instance that asked is gone), the decision is recorded and applies if the agent
    # asks for exactly the same again; "never": orphaned and nothing can ask for it again (its
    # agent is not hosted here, or it has no request hash to match): the decision closes it;
    # "waiting": an approval counted toward a request that needs more approvers (`approvals`)
    applies: Literal["now", "later", "never", "waiting"]
    effect: str
    operator: str = ""
    request_hash: str = ""
    reason: str = ""
    approvals: ApprovalProgress | None = None


class PendingApproval(ApprovalRequest, frozen=True):
    """A pending request as listed: `state` is `orphaned` when no running call waits for it;
    `approvals` where it needs more than one approver."""

    state: Literal["pending", "orphaned"] = "pending"
    note: str | None = None
    approvals: ApprovalProgress | UnsetType = UNSET


class BatchResult(msgspec.Struct, omit_defaults=True):
    """`ids` were decided; `waiting` were approved by this token and still need more
    approvers; `skipped` were unknown, already resolved, hosted elsewhere, or approved by this
    token already (or needing only groups it is not in)."""

    decided: int
    ids: list[str]
    skipped: list[str]
    waiting: list[str] = []


RequestHash = Annotated[str, msgspec.Meta(pattern=r"^sha256:[0-9a-f]{64}$(?!\n)")]
MAX_REASON = 500
# one line of visible text with something in it: shown in tables and in the agent's error
Reason = Annotated[
    str,
    msgspec.Meta(
        min_length=1,
        max_length=MAX_REASON,
        description=(
            "why the request is denied (deny only): one line, up to 500 characters, with no "
            "control, bidi or other invisible character"
        ),
    ),
]


def _reason_is_for_deny(decision: Decision, reason: str | None) -> None:
    if reason is not None and decision != "deny":
        raise ValueError("`reason` is given only with decision deny")
    if reason is not None:
        _reason_is_readable(reason)


def _reason_is_readable(reason: str) -> None:
    """Refuse what would show as something else: a reason of "\u202eevorppa" reads "approve"
    wherever bidi text is laid out, and an ESC or CR rewrites an operator's terminal."""
    invisible = first_invisible(reason)
    if invisible is not None:
        raise ValueError(
            f"`reason` must be one line of visible text: it holds {visible(invisible)} "
            "(no control, bidi or other invisible character)"
        )
    if not reason.strip(" "):
        raise ValueError("`reason` must say something: it is only spaces")


class DecisionBody(msgspec.Struct, forbid_unknown_fields=True):
    decision: Decision
    # optional: decide only if the request is still exactly the one the operator read (409)
    request_hash: RequestHash | None = None
    reason: Reason | None = None  # shown to the agent and in the history

    def __post_init__(self) -> None:
        _reason_is_for_deny(self.decision, self.reason)


class BatchBody(msgspec.Struct, forbid_unknown_fields=True):
    ids: Annotated[list[ApprovalId], msgspec.Meta(max_length=10_000)]
    decision: Decision
    reason: Reason | None = None

    def __post_init__(self) -> None:
        _reason_is_for_deny(self.decision, self.reason)


def gate_of(request: web.Request) -> ApprovalGate:
    return request.app[APPROVALS]


NEVER_NOTE = "the agent instance that asked is gone and nothing can ask for this again"
ORPHANED_NOTE = (
    "the agent instance that asked is gone: applies if the agent asks for the same again"
)


async def list_approvals(request: web.Request) -> web.Response:
    gate = gate_of(request)
    listed = []
    for r in gate.projection.list():
        orphaned = gate.is_orphaned(r)
        note = (ORPHANED_NOTE if gate.can_ask_again(r) else NEVER_NOTE) if orphaned else None
        state: Literal["pending", "orphaned"] = "orphaned" if orphaned else "pending"
        approvals = approval_progress(r) if r.approvers else UNSET
        listed.append(
            PendingApproval(
                **msgspec.structs.asdict(r), state=state, note=note, approvals=approvals
            )
        )
    return page_response(request, listed)


def approval_progress(request: ApprovalRequest) -> ApprovalProgress:
    given = [Approver(e.operator, frozenset(e.groups)) for e in request.endorsements or ()]
    return ApprovalProgress(**progress_view(progress(request.approvers or (), given)))


async def list_batched(request: web.Request) -> web.Response:
    """Every group, with as many of its ids as fit in a page (`count` counts them all)."""
    room = page_bytes(request.app[CONTEXT])
    groups: list[Group] = []
    for group in gate_of(request).projection.groups():
        ids: list[str] = []
        for approval_id in group.ids:
            room -= len(approval_id) + 3
            if room < 0 and (ids or groups):
                break
            ids.append(approval_id)
        groups.append(Group(group.agent, group.capability, group.count, ids))
    return json_response({"groups": groups})


async def decide(request: web.Request) -> web.Response:
    body = await json_body(request, DecisionBody)
    gate, approval_id = gate_of(request), request.match_info["approval_id"]
    asked = gate.projection.get(approval_id)
    result = await gate.decide(
        approval_id,
        body.decision,
        request[IDENTITY].name,
        request_hash=body.request_hash,
        reason=body.reason,
        groups=request[IDENTITY].groups,
    )
    if asked is not None:
        await confirmed(request.app, [asked.agent])
    return json_response(result)


async def decide_batch(request: web.Request) -> web.Response:
    body = await json_body(request, BatchBody)
    gate = gate_of(request)
    identity = request[IDENTITY]
    result = await gate.decide_batch(
        body.ids, body.decision, identity.name, reason=body.reason, groups=identity.groups
    )
    asked = (gate.projection.resolution(i) for i in result["ids"])
    await confirmed(request.app, [r.agent for r in asked if r is not None])
    return json_response(result)


async def lifecycle(app: web.Application) -> AsyncIterator[None]:
    gate = app[APPROVALS]
    await gate.start()
    yield
    await gate.close()


def setup(app: web.Application) -> None:
    ctx = app[CONTEXT]
    app[APPROVALS] = ApprovalGate(ctx)
    # on disk, folded by the journal's writer (projections/models.py): read at each scrape
    ctx.metrics.approvals_pending.set_function(lambda: ctx.projections.get(Approvals).count)
    app.cleanup_ctx.append(lifecycle)
    add_route(
        app,
        "GET",
        "/api/v1/approvals",
        list_approvals,
        "read",
        Doc(
            "Pending approval requests, oldest first, a page at a time",
            "approvals",
            list[PendingApproval],
            errors=(400,),
            query=(CURSOR,),
            description=PAGED,
        ),
    )
    add_route(
        app,
        "GET",
        "/api/v1/approvals/batched",
        list_batched,
        "read",
        Doc(
            "Pending approval requests grouped by agent and capability",
            "approvals",
            Batched,
            description="`count` is the group's size; `ids` holds as many of them (oldest "
            "first) as fit in about `node.page_max_kb` for all groups together.",
        ),
    )
    # before /{approval_id}, which would otherwise take "batch" for an id
    add_route(
        app,
        "POST",
        "/api/v1/approvals/batch",
        decide_batch,
        "operate",
        Doc(
            "Decide many approvals at once",
            "approvals",
            BatchResult,
            errors=(400,),
            body=BatchBody,
            description="Pending ids are decided in one atomic append; the others are skipped. "
            "A denial may carry a `reason`, given to the agent and kept in the history. An "
            "approval of a request that needs several approvers counts toward them (`waiting` "
            "lists those still pending).",
        ),
    )
    add_route(
        app,
        "POST",
        "/api/v1/approvals/{approval_id}",
        decide,
        "operate",
        Doc(
            "Decide one approval",
            "approvals",
            DecisionResult,
            errors=(400, 403, 404, 409),
            body=DecisionBody,
            description="404 when the id is unknown, decided or timed out; 409 when the node "
            "abandoned it (with the reason), when the agent is hosted on another node (with "
            "`home_node`), or when `request_hash` is given and is not the pending request's. "
            "On an orphaned request the decision is recorded (`applies: later`) and applies if "
            "the agent asks for the same again. A denial may carry a `reason` (one line, "
            "up to 500 characters), given to the agent and kept in the history. On a request "
            "that needs several approvers (`approvals`), an approval counts once per token and "
            "the request stays pending (`applies: waiting`) until enough have approved; 409 "
            "when this token approved it already, 403 when the token is in none of the groups "
            "still missing; any denial decides.",
        ),
    )
