"""Commands on logs and findings: validate, journal, and answer with the projection's seq."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from node.config import AGENT_NAME
from node.context import NodeContext
from node.services.journal import ensure_local
from projections import catalogue as c
from projections.entries import Findings

Severity = Literal["info", "low", "medium", "high", "critical"]


class NewFinding(msgspec.Struct, forbid_unknown_fields=True):
    agent: Annotated[str, msgspec.Meta(pattern=AGENT_NAME)]
    severity: Severity
    title: Annotated[str, msgspec.Meta(min_length=1, max_length=1000)]
    detail: Annotated[str, msgspec.Meta(max_length=65_536)] = ""


async def report_finding(ctx: NodeContext, finding: NewFinding, incident: str = "") -> int:
    """Journal the finding in the reporter's journal; returns its finding seq. The one writer of
    findings the node reports (over the API, and its own sync incidents, which carry an
    `incident` key); an agent's own findings are its host's (node/runtime/host.py)."""
    ensure_local(ctx, finding.agent)
    payload = c.Finding(
        severity=finding.severity,
        title=finding.title,
        detail=finding.detail,
        incident=incident or None,
    )
    envelope = await ctx.store.append(finding.agent, *c.event_of(payload))
    seq = ctx.projections.get(Findings).seq_at(envelope.position)
    assert seq is not None, "the findings projection folds before append returns"
    return seq
