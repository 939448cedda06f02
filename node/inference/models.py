"""The models this node serves, by alias: `[inference.models.<alias>]`, plus the old
`local_url`/`cloud_url` as the aliases `local` and `cloud` (unless the table names them), and
which of them an agent may use (its `[agents.inference]`, bounded by consent on a hosting node).

Prices are kept as integer nano-units per token (a price per million tokens times 1000), so that a
call's cost is an exact integer and budgets add up without rounding drift.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Literal

from node.config.inference import AgentInference, InferenceSection
from node.runtime.hostapi import HostError

Provider = Literal["openai", "anthropic"]
NANOS = 1_000_000_000  # cost units per currency unit


@dataclass(frozen=True)
class Model:
    alias: str
    provider: Provider
    base_url: str
    model: str  # the provider's name
    route: Literal["local", "cloud"]
    input_nanos: int  # per token
    output_nanos: int
    max_tokens: int
    timeout_secs: float
    api_key: str | None = None  # given in the config (or its file)
    api_key_env: str | None = None  # read at each call (a rotated key is used at once)

    def key(self) -> str | None:
        if self.api_key:
            return self.api_key
        return os.environ.get(self.api_key_env) or None if self.api_key_env else None

    def cost_nanos(self, input_tokens: int, output_tokens: int) -> int:
        return input_tokens * self.input_nanos + output_tokens * self.output_nanos


def per_token_nanos(price_per_million: float) -> int:
    exact = Decimal(str(price_per_million)) * 1000
    return int(exact.quantize(Decimal(1), rounding=ROUND_HALF_UP))


def cost_text(nanos: int) -> str:
    """A cost in currency units, exactly (`0.000123`), as journals, metrics and the CLI show it."""
    return format(Decimal(nanos) / NANOS, "f").rstrip("0").rstrip(".") if nanos else "0"


def cost_bound(nanos: int) -> float:
    """A cost rounded up to 4 decimal places, a JSON number a Cedar `decimal` takes: what a
    policy judges a call's most by (never less than it may cost)."""
    tenth_millis = -(-nanos // (NANOS // 10_000))
    return float(Decimal(tenth_millis) / 10_000)


def catalogue(section: InferenceSection) -> dict[str, Model]:
    models: dict[str, Model] = {}
    legacy = (
        ("local", section.local_url, section.local_model, None),
        ("cloud", section.cloud_url, section.cloud_model, section.cloud_api_key_env),
    )
    for alias, url, name, key_env in legacy:
        if url and alias not in section.models:
            models[alias] = Model(
                alias=alias,
                provider="openai",
                base_url=url,
                model=name,
                route=alias,  # type: ignore[arg-type]
                input_nanos=0,
                output_nanos=0,
                max_tokens=4096,
                timeout_secs=section.timeout_secs,
                api_key_env=key_env,
            )
    for alias, entry in section.models.items():
        models[alias] = Model(
            alias=alias,
            provider=entry.provider,
            base_url=entry.base_url,
            model=entry.model,
            route=entry.route,
            input_nanos=per_token_nanos(entry.input_price),
            output_nanos=per_token_nanos(entry.output_price),
            max_tokens=entry.max_tokens,
            timeout_secs=entry.timeout_secs or section.timeout_secs,
            api_key=entry.api_key,
            api_key_env=entry.api_key_env,
        )
    return models


def node_default(section: InferenceSection) -> str:
    return section.default_model or section.default_route


def allowed(agent: AgentInference, section: InferenceSection) -> tuple[frozenset[str], str]:
    """(the aliases an agent may use, its default): those it lists, or the node's default
    model alone when it lists none."""
    if not agent.models:
        default = node_default(section)
        return frozenset({default}), default
    default = agent.default or agent.models[0]
    return frozenset(agent.models), default


def choose(
    wanted: str | None, agent_name: str, agent: AgentInference, section: InferenceSection
) -> str:
    """The alias a call uses: the one it names (one the agent may use) or the agent's default."""
    aliases, default = allowed(agent, section)
    alias = wanted or default
    if alias not in aliases:
        names = ", ".join(sorted(aliases))
        raise HostError(
            "not-permitted",
            f"model {alias[:100]!r} is not among the models agent {agent_name} may use "
            f"(inference.models: {names})",
        )
    return alias
