"""An agent's definition, as a request, a runtime.toml entry and an event carry it, and where
it may run (its placement set): the pure pieces the deployment service
(node/services/deployments.py), the placement manager and the API share."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec

from eventstore.store import NewEvent
from node.config.model import AgentConfig, ConfigError, placement_problems
from node.context import NodeContext
from node.web.http import Problem, problem_list
from projections import catalogue as c
from projections.deployments import DeployedAgents
from projections.journals import Journals
from projections.placements import Placements

RESERVED_NAMES = frozenset({"stream"})  # /api/v1/agents/stream is the per-agent event stream


class DeployRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """PUT /api/v1/agents/{name}: what runtime.toml's [[agents]] entry says, from the registry."""

    component: str  # registry:ID@VERSION (publish an uploaded component first)
    description: str = ""
    tick_interval_ms: int = 1000
    fuel_per_tick: int | None = None  # None: the node's default budget
    memory_limit_mb: int = 64
    tick_timeout_ms: int = 10_000
    mcp: bool = False
    capabilities: dict[str, Any] = {}
    approval: dict[str, Any] = {}
    grant_domains: list[str] = []
    allow_hosts: list[str] = []
    inference_models: list[str] = []  # the model aliases it may use (docs/inference.md)
    inference_default: str | None = None
    # node names that may host it (docs/mesh.md, "Placement and failover"); None: as it is
    # (this node alone for a new agent)
    placement: list[str] | None = None


class RollbackRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    reason: str = ""


def definition_of(agent: AgentConfig, sha256: str) -> c.AgentDefinition:
    return c.AgentDefinition(
        component=agent.component,
        sha256=sha256,
        description=agent.description,
        capabilities={k: bool(v) for k, v in agent.capabilities.items()},
        approval=dict(agent.approval),
        limits=c.AgentLimits(**agent.limits()),
        mcp=agent.mcp,
        grant_domains=list(agent.grants.domains),
        allow_hosts=list(agent.http.allow_hosts),
        inference_models=list(agent.inference.models),
        inference_default=agent.inference.default,
    )


def config_of(name: str, definition: c.AgentDefinition) -> AgentConfig:
    """The runtime.toml entry a deployment amounts to (what the agent's host reads)."""
    raw: dict[str, Any] = {
        "name": name,
        "component": definition.component,
        "description": definition.description,
        **msgspec.structs.asdict(definition.limits),
        "mcp": definition.mcp,
        "capabilities": dict(definition.capabilities),
        "approval": dict(definition.approval),
        "grants": {"domains": list(definition.grant_domains)},
        "http": {"allow_hosts": list(definition.allow_hosts)},
        "inference": {
            "models": list(definition.inference_models),
            "default": definition.inference_default,
        },
    }
    return msgspec.convert(raw, AgentConfig)


def bounded(definition: c.AgentDefinition) -> c.AgentDefinition:
    """The definition as the catalogue bounds it (a Struct built in code is not checked)."""
    try:
        return msgspec.convert(msgspec.to_builtins(definition), c.AgentDefinition)
    except msgspec.ValidationError as exc:
        raise Problem(400, f"invalid body: {str(exc).replace('`$.', '`')}") from None


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return f"sha256:{digest.hexdigest()}"


def placement_set(ctx: NodeContext, given: list[str] | None, name: str) -> tuple[str, ...]:
    """The placement set a deployment asks for: `given` checked (422 saying what is wrong),
    else the agent's current one from its journal, else this node alone."""
    if given is None:
        placed = ctx.projections.get(Placements).get(name)
        return placed.placement if placed is not None else (ctx.name,)
    problems = list(placement_problems(given, ctx.config, "placement"))
    if problems:
        raise Problem(422, problem_list(problems))
    return tuple(given) if given else (ctx.name,)


def placed_event(
    ctx: NodeContext,
    name: str,
    placement: tuple[str, ...],
    definition: c.AgentDefinition,
    only_if_moved: bool,
    change: c.PlacedChange = "placed",
    operator: str | None = None,
) -> NewEvent | None:
    """The `agent.placed` to journal in the agent's own journal, or None: for an agent never
    placed on more than one node, and when neither the set nor (unless `only_if_moved`) the
    definition changed. A deployment of a name whose placement was retired journals one (of
    this node alone): the journal then says the retirement is over, so no node forgets the
    new deployment for the old removal. It names the deployment (revision, `change`,
    `operator`) it follows, so every node of the set shows the agent's history whoever made
    it."""
    placement = tuple(placement) or (ctx.name,)
    placements = ctx.projections.get(Placements)
    current = placements.get(name)
    if current is None and len(placement) <= 1 and name not in placements.agents:
        return None  # never placed; one that was and is removed gets one: it is no longer
    same_set = current is not None and current.placement == placement
    if same_set and (only_if_moved or current.definition == definition):  # type: ignore[union-attr]
        return None
    epoch = ctx.projections.get(Journals).epoch_of(name)
    deployed = ctx.projections.get(DeployedAgents).get(name)
    placed = c.AgentPlaced(
        placement=list(placement),
        definition=definition,
        epoch=epoch,
        revision=deployed.current.revision if deployed is not None else 1,  # a new one: 1
        operator=operator,
        change=change,
    )
    return NewEvent(name, *c.event_of(placed))


def refuse_foreign(ctx: NodeContext, agents: Iterable[AgentConfig]) -> set[str]:
    """A journal has one writer: an agent whose journal came from another node is not ours
    (ConfigError, docs/operations.md "Start refusals"). The names returned are declared agents
    whose journal was placed and is written elsewhere by a set that no longer names this node:
    this node keeps a replica of each and never runs it."""
    journals = ctx.projections.get(Journals)
    placements = ctx.projections.get(Placements)
    dropped: set[str] = set()
    for agent in agents:
        home = journals.home_of(agent.name)
        placed = placements.get(agent.name)
        if placed is not None and ctx.name in placed.placement:
            continue  # placed here too: it runs where its journal and its lease say
        if home in (None, ctx.name):
            continue
        if journals.placement_of(agent.name) is not None:
            dropped.add(agent.name)
            continue
        raise ConfigError(
            f"agents: {agent.name!r} is hosted on node {home!r} (its journal was written "
            "there); agent names must be unique across the mesh: rename this node's agent, "
            'or drop its [[agents]] entry (docs/operations.md, "Start refusals")'
        )
    return dropped
