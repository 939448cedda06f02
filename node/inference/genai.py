"""An inference call's span attributes, by OpenTelemetry's semantic conventions for generative
AI (`gen_ai.*`), plus the node's own (`agent`, `agent_node.inference.*`)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from node.inference.models import cost_text
from node.inference.service import Call, Outcome


def request_attributes(call: Call) -> dict[str, Any]:
    model = call.model
    url = urlsplit(model.base_url)
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": model.provider,
        "gen_ai.system": model.provider,  # the older name of the provider attribute
        "gen_ai.request.model": model.model,
        "gen_ai.request.max_tokens": call.max_tokens,
        "server.address": url.hostname or "",
        "agent": call.agent,
        "agent_node.inference.model": model.alias,
        "agent_node.inference.route": model.route,
    }
    if url.port:
        attributes["server.port"] = url.port
    if call.chat.temperature is not None:
        attributes["gen_ai.request.temperature"] = call.chat.temperature
    return attributes


def response_attributes(outcome: Outcome) -> dict[str, Any]:
    done = outcome.completion
    attributes: dict[str, Any] = {
        "gen_ai.response.model": done.model,
        "gen_ai.response.finish_reasons": [done.finish_reason or ""],
        "gen_ai.usage.input_tokens": done.input_tokens,
        "gen_ai.usage.output_tokens": done.output_tokens,
        "agent_node.inference.cost": cost_text(outcome.cost_nanos),
        "agent_node.inference.tool_calls": len(done.tool_calls),
    }
    if outcome.first_token_ms is not None:
        attributes["agent_node.inference.first_token_ms"] = outcome.first_token_ms
    return attributes
