"""Commands on logs and findings: validate, journal, and answer with the projection's seq."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from node.config.model import AGENT_NAME
from node.context import NodeContext
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


async def post_finding(ctx: NodeContext, finding: NewFinding, poster: str) -> tuple[int, bool]:
    """A finding an API client posts (the spec: "reported by an agent or an external
    integration"): (its seq, whether `agent` is a journal of this node). About a hosted agent,
    the node itself or a journal this node writes, it goes into that journal; about any other
    name (an integration's own, an agent hosted elsewhere) into the node's own journal, with the
    name as its `subject`, so no journal named after someone else's agent is ever started or
    written here. Marked with the posting token's name."""
    name = finding.agent
    if name == ctx.name or ctx.config.agent(name) is not None:
        return await report_finding(ctx, finding, posted_by=poster), True
    if ctx.projections.get(Journals).home.get(name) == ctx.name:
        return await report_finding(ctx, finding, posted_by=poster), True
    return await report_finding(ctx, finding, posted_by=poster, subject=name), False


async def report_finding(
    ctx: NodeContext,
    finding: NewFinding,
    incident: str = "",
    posted_by: str | None = None,
    subject: str | None = None,
) -> int:
    """Journal the finding in the reporter's journal; returns its finding seq. The one writer of
    findings the node reports (over the API, and its own sync incidents, which carry an
    `incident` key); an agent's own findings are its host's (node/runtime/host.py). With a
    `subject`, the finding is about that name and goes into the node's own journal."""
    stream = ctx.name if subject is not None else finding.agent
    ensure_local(ctx, stream)
    payload = c.Finding(
        severity=finding.severity,
        title=finding.title,
        detail=finding.detail,
        incident=incident or None,
        posted_by=posted_by,
        subject=subject,
    )
    envelope = await ctx.store.append(stream, *c.event_of(payload))
    seq = ctx.projections.get(Findings).seq_at(envelope.position)
    assert seq is not None, "the findings projection folds before append returns"
    return seq
