"""`[inference]`, its models (`[inference.models.<alias>]`) and an agent's `[agents.inference]`.

The old `local_url`/`cloud_url` keys are two aliases, `local` and `cloud`, unless
`[inference.models]` names those aliases itself (node/inference/models.py resolves them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Annotated, Any, Literal

import msgspec

from node.config.names import AGENT_NAME
from node.policy.budgets import parse_budget

ModelAlias = Annotated[str, msgspec.Meta(pattern=AGENT_NAME)]
NonNegative = Annotated[float, msgspec.Meta(ge=0)]
LEGACY_ALIASES = ("local", "cloud")


class _Section(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    pass


class ModelSection(_Section, kw_only=True):
    """One model an operator names (docs/inference.md, "Models")."""

    provider: Literal["openai", "anthropic"] = "openai"  # openai: any OpenAI-compatible server
    base_url: str  # …/v1 (an OpenAI-compatible server; Anthropic's https://api.anthropic.com/v1)
    model: str  # the provider's name of the model
    api_key_env: str | None = None  # the environment variable holding the API key, or
    api_key_file: str | None = None  # a file holding it (0600, like every *_file secret)
    api_key: str | None = None  # or the key itself (better: one of the two above)
    input_price: NonNegative = 0.0  # per million input tokens (one currency for the node)
    output_price: NonNegative = 0.0  # per million output tokens
    route: Literal["local", "cloud"] = "local"  # its label in svc_inference_requests_total
    max_tokens: Annotated[int, msgspec.Meta(gt=0, le=1_000_000)] = 4096  # when a call says none
    timeout_secs: Annotated[float, msgspec.Meta(gt=0)] | None = None  # default: [inference]'s


class InferenceBudget(_Section, kw_only=True):
    """`[[inference.budgets]]`: `rule` is node/policy/budgets.py's text, in tokens or cost:
    "tokens 100000 per day", "cost 2.5 per month for group support", "cost 50 per week for
    node"; a call that would pass it is refused, or asked of people (`over = "ask"`)."""

    rule: str
    over: Literal["refuse", "ask"] = "refuse"


class InferenceSection(_Section, kw_only=True):
    local_url: str | None = None  # the `local` alias (unless [inference.models] names one)
    cloud_url: str | None = None  # the `cloud` alias
    cloud_api_key_env: str | None = None
    default_route: Literal["local", "cloud"] = "local"
    local_model: str = "local"
    cloud_model: str = "default"
    timeout_secs: Annotated[float, msgspec.Meta(gt=0)] = 120.0
    models: Annotated[dict[ModelAlias, ModelSection], msgspec.Meta(max_length=1000)] = {}
    default_model: ModelAlias | None = None  # none: default_route
    # the most one agent's calls may ask in one minute (0: no limit); an agent's own may be less
    requests_per_minute: Annotated[int, msgspec.Meta(ge=0)] = 0
    tokens_per_minute: Annotated[int, msgspec.Meta(ge=0)] = 0
    # a provider's 429 or 503 is tried again this often (after its Retry-After, within the
    # run's deadline)
    retries: Annotated[int, msgspec.Meta(ge=0, le=10)] = 2
    budgets: Annotated[list[InferenceBudget], msgspec.Meta(max_length=100)] = []
    # tokens (and tool-call arguments) that arrive within this of the last stream event sent
    # go out together, in one event (0: each on its own); the first goes out at once
    stream_window_ms: Annotated[int, msgspec.Meta(ge=0, le=1000)] = 10


class AgentInference(_Section, kw_only=True):
    """`[agents.inference]`: the model aliases the agent may use and its default (none listed:
    the node's default model alone). The capability itself is `capabilities.inference`."""

    models: Annotated[list[ModelAlias], msgspec.Meta(max_length=100)] = []
    default: ModelAlias | None = None


def configured_aliases(section: InferenceSection) -> set[str]:
    """Every alias this node serves: its models, and `local`/`cloud` where their URL is set."""
    aliases = set(section.models)
    if section.local_url:
        aliases.add("local")
    if section.cloud_url:
        aliases.add("cloud")
    return aliases


def inference_problems(config: Any, source: str) -> Iterator[str]:
    """[inference] and each agent's [agents.inference]; never echoes a key."""
    section: InferenceSection = config.inference
    known = configured_aliases(section)
    for alias, model in section.models.items():
        where = f"{source}: inference.models.{alias}"
        if not re.match(r"^https?://[^/\s]+", model.base_url):
            yield f"{where}.base_url: must start with http:// or https:// and a host"
        given = [model.api_key_env, model.api_key_file or model.api_key]  # the file fills api_key
        if sum(value is not None for value in given) > 1:
            yield f"{where}: give only one of api_key, api_key_env or api_key_file"
    default = section.default_model
    if default is not None and default not in section.models and default not in known:
        yield f"{source}: inference.default_model: {default!r} is no model of [inference.models]"
    for i, budget in enumerate(section.budgets):
        where = f"{source}: inference.budgets[{i}].rule"
        try:
            parsed = parse_budget(budget.rule)
        except ValueError as e:
            yield f"{where}: {e}"
            continue
        if parsed.field not in ("tokens", "cost"):
            yield f"{where}: an inference budget counts tokens or cost, not {parsed.field!r}"
        if parsed.scope.kind == "group" and parsed.scope.name not in config.agent_groups:
            yield f"{where}: no [agent_groups] {parsed.scope.name!r}"
    for i, agent in enumerate(config.agents):
        yield from _agent_problems(agent.inference, known, f"{source}: agents[{i}].inference")


def _agent_problems(wanted: AgentInference, known: Iterable[str], where: str) -> Iterator[str]:
    known = set(known) | set(LEGACY_ALIASES)  # a legacy route fails at the call when unset
    for alias in wanted.models:
        if alias not in known:
            yield f"{where}.models: {alias!r} is no model of [inference.models]"
    if wanted.default is not None and wanted.models and wanted.default not in wanted.models:
        yield f"{where}.default: {wanted.default!r} is not one of its models"
