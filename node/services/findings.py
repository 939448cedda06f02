"""Commands on logs and findings: validate, journal, and answer with the projection's seq."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from node.config import AGENT_NAME
from node.context import NodeContext
from node.http import Problem
from node.services.journal import ensure_local
from projections import catalogue as c
from projections.entries import Findings
from projections.journals import Journals

Severity = Literal["info", "low", "medium", "high", "critical"]


class NewFinding(msgspec.Struct, forbid_unknown_fields=True):
    agent: Annotated[str, msgspec.Meta(pattern=AGENT_NAME)]
    severity: Severity
    title: Annotated[str, msgspec.Meta(min_length=1, max_length=1000)]
    detail: Annotated[str, msgspec.Meta(max_length=65_536)] = ""


async def post_finding(ctx: NodeContext, finding: NewFinding, poster: str) -> int:
    """A finding an API client posts about an agent: into a journal that exists, or the
    poster's own (an external scanner reports under its token's name); 404 otherwise, so a
    typo never starts a new journal. Marked with the posting token's name."""
    if finding.agent != poster and not journal_exists(ctx, finding.agent):
        raise Problem(
            404,
            f"no agent or journal named {finding.agent!r} on this node: findings are posted "
            f"about a hosted agent, a journal the node has, the node itself ({ctx.name!r}), "
            f"or the poster itself ({poster!r})",
        )
    return await report_finding(ctx, finding, posted_by=poster)


def journal_exists(ctx: NodeContext, name: str) -> bool:
    """A hosted agent (configured, running or not), a journal the node holds (its own agents'
    and replicas), or the node's own journal."""
    return (
        name == ctx.name
        or ctx.config.agent(name) is not None
        or name in ctx.projections.get(Journals).head
    )


async def report_finding(
    ctx: NodeContext, finding: NewFinding, incident: str = "", posted_by: str | None = None
) -> int:
    """Journal the finding in the reporter's journal; returns its finding seq. The one writer of
    findings the node reports (over the API, and its own sync incidents, which carry an
    `incident` key); an agent's own findings are its host's (node/runtime/host.py)."""
    ensure_local(ctx, finding.agent)
    payload = c.Finding(
        severity=finding.severity,
        title=finding.title,
        detail=finding.detail,
        incident=incident or None,
        posted_by=posted_by,
    )
    envelope = await ctx.store.append(finding.agent, *c.event_of(payload))
    seq = ctx.projections.get(Findings).seq_at(envelope.position)
    assert seq is not None, "the findings projection folds before append returns"
    return seq
