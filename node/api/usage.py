"""GET /api/v1/usage: what each agent's inference used and cost, per model, since a time
(`?since=30d`, `12h`, or an ISO 8601 time; `?agent=` for one), from the usage read model
(projections/usage.py). The console's usage view and `agent-node usage` read it."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
from aiohttp import web

from node.context import CONTEXT
from node.inference.models import cost_text
from node.web.http import Problem, json_response
from node.web.routes import Doc, Query, add_route
from projections import catalogue as c
from projections.usage import Bucket, Usage

UNITS = {"m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}
MAX_SINCE_SECS = 5 * 366 * 86_400


class ModelUsage(msgspec.Struct, kw_only=True):
    model: str
    calls: int
    errors: int
    refused: int
    input_tokens: int
    output_tokens: int
    cost: str  # exact, in the node's currency
    cost_nanos: int
    mean_ms: int


class AgentUsage(msgspec.Struct, kw_only=True):
    agent: str
    calls: int
    input_tokens: int
    output_tokens: int
    cost: str
    models: list[ModelUsage]


class UsageReport(msgspec.Struct, kw_only=True):
    since: str
    agents: list[AgentUsage]


def since_of(text: str, now: datetime) -> datetime:
    """`30d`, `12h`, `90m`, `2w` before now, or an ISO 8601 time; Problem 400 otherwise."""
    match = re.fullmatch(r"([0-9]{1,6})([mhdw])", text)
    if match:
        seconds = int(match.group(1)) * UNITS[match.group(2)]
        if seconds > MAX_SINCE_SECS:
            raise Problem(400, f"since: at most {MAX_SINCE_SECS // 86_400} days")
        return now - timedelta(seconds=seconds)
    when = c.parse_ts(text) if len(text) <= 64 else None
    if when is None:
        try:
            when = datetime.fromisoformat(text[:64]).replace(tzinfo=UTC)
        except ValueError:
            raise Problem(
                400, "since: a duration (30d, 12h, 90m, 2w) or an ISO 8601 time"
            ) from None
    return when


def _model(name: str, b: Bucket) -> ModelUsage:
    return ModelUsage(
        model=name,
        calls=b.calls,
        errors=b.errors,
        refused=b.refused,
        input_tokens=b.input_tokens,
        output_tokens=b.output_tokens,
        cost=cost_text(b.cost_nanos),
        cost_nanos=b.cost_nanos,
        mean_ms=b.ms // b.calls if b.calls else 0,
    )


def report(usage: Usage, since: datetime, agent: str | None) -> UsageReport:
    agents = []
    for name, models in sorted(usage.totals(since, agent).items()):
        rows = [_model(m, b) for m, b in sorted(models.items())]
        agents.append(
            AgentUsage(
                agent=name,
                calls=sum(r.calls for r in rows),
                input_tokens=sum(r.input_tokens for r in rows),
                output_tokens=sum(r.output_tokens for r in rows),
                cost=cost_text(sum(r.cost_nanos for r in rows)),
                models=rows,
            )
        )
    return UsageReport(since=since.astimezone(UTC).isoformat(), agents=agents)


async def get_usage(request: web.Request) -> web.Response:
    query: dict[str, Any] = dict(request.query)
    since = since_of(str(query.get("since", "30d")), datetime.now(UTC))
    agent = query.get("agent") or None
    usage = request.app[CONTEXT].projections.get(Usage)
    return json_response(report(usage, since, agent))


def setup(app: web.Application) -> None:
    add_route(
        app,
        "GET",
        "/api/v1/usage",
        get_usage,
        "read",
        Doc(
            "Inference usage and cost per agent and model",
            "inference",
            UsageReport,
            errors=(400,),
            query=(
                Query("agent", str, "only this agent"),
                Query("since", str, "a duration (30d, 12h, 90m, 2w) or an ISO 8601 time"),
            ),
        ),
    )
