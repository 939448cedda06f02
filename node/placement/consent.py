"""Consent: whether this node hosts a placed agent another node deployed, and with what.

A placed agent's definition (its latest `agent.placed`) was written by whichever node was its
home: a member of the mesh, a stranger with a key. It decides nothing here by itself. This node
hosts an agent only when its own operator said so, in one of three ways (the first found):

- a `[[hosting]]` entry naming the agent (runtime.toml, docs/configuration.md), and its
  owner (`owner`): the node whose agent it is;
- an `[[agents]]` entry of that name (this node declares it: its own agent);
- a deployment of that name by an operator of this node (its API, journaled with the
  operator's name in `$node`): the latest such definition is the consent, for this node's own
  agent.

Consent names whose agent, not only which name: a member of the mesh may deploy an agent of
any name from its own node (it is then that agent's owner, node/sync/rules/owner.py), so an
agent of the consented name whose owner is not the one the consent names is refused here.

What the agent gets here is the definition bounded by the consent (`bound`): a capability only
when both enable it, gated when either gates it, grant domains and allowed hosts both name,
the smaller of each run limit, MCP only when both allow it, the inference models both name
(none in common: this node's default model alone). A node is eligible to host it
(`refusal` says why not) only when every grant domain the definition asks for is consented
and served here (a secret the agent cannot read would fail it), and its component is one the
consent allows. The component itself passes this node's own compile check before it runs
(node/placement/prepare.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from node.config.model import AgentConfig, Config, HostingConfig
from projections import catalogue as c
from projections.deployments import DeployedAgent


@dataclass(frozen=True)
class Consent:
    """What this node's operator allows a placed agent here."""

    source: str  # "hosting" | "agents" | "deployed": where it was said (for people)
    capabilities: frozenset[str]  # enabled
    gates: dict[str, bool | str]  # capability → True (always ask) or "policy" (this node's set)
    timeout_secs: int | None
    grant_domains: frozenset[str]
    allow_hosts: frozenset[str]
    mcp: bool
    limits: c.AgentLimits  # caps (tick_interval_ms: a floor)
    components: frozenset[str]  # sha256:... allowed; empty: any
    # the node whose agent this consent is for (None: any node's agent of that name)
    owner: str | None = None
    inference_models: frozenset[str] = frozenset()  # model aliases it may use here

    @classmethod
    def of_hosting(cls, entry: HostingConfig) -> Consent:
        timeout = entry.approval.get("timeout_secs")
        return cls(
            source="hosting",
            capabilities=frozenset(k for k, v in entry.capabilities.items() if v is True),
            gates=_gates(entry.approval),
            timeout_secs=int(timeout) if isinstance(timeout, int) else None,
            grant_domains=frozenset(entry.grants.domains),
            allow_hosts=frozenset(entry.http.allow_hosts),
            mcp=entry.mcp,
            limits=c.AgentLimits(
                tick_interval_ms=entry.tick_interval_ms,
                fuel_per_tick=entry.fuel_per_tick,
                memory_limit_mb=entry.memory_limit_mb,
                tick_timeout_ms=entry.tick_timeout_ms,
            ),
            components=frozenset(entry.components),
            owner=entry.owner,
            inference_models=frozenset(entry.inference.models),
        )

    @classmethod
    def of_definition(
        cls, source: str, definition: c.AgentDefinition, owner: str | None = None
    ) -> Consent:
        timeout = definition.approval.get("timeout_secs")
        return cls(
            source=source,
            capabilities=frozenset(k for k, v in definition.capabilities.items() if v),
            gates=_gates(definition.approval),
            timeout_secs=timeout if isinstance(timeout, int) and timeout is not True else None,
            grant_domains=frozenset(definition.grant_domains),
            allow_hosts=frozenset(definition.allow_hosts),
            mcp=definition.mcp,
            limits=definition.limits,
            components=frozenset(),
            owner=owner,
            inference_models=frozenset(definition.inference_models),
        )

    def bound(self, definition: c.AgentDefinition) -> c.AgentDefinition:
        """The definition as it runs here: never more than this consent allows."""
        capabilities = {
            k: bool(v) and k in self.capabilities for k, v in definition.capabilities.items()
        }
        asked = _gates(definition.approval)
        approval: dict[str, bool | int | Literal["policy"]] = {}
        for name in sorted(set(asked) | set(self.gates)):  # the stricter of the two
            strictness = max(_STRICTNESS[asked.get(name)], _STRICTNESS[self.gates.get(name)])
            approval[name] = True if strictness == 2 else "policy"
        timeouts = [
            t
            for t in (definition.approval.get("timeout_secs"), self.timeout_secs)
            if isinstance(t, int) and not isinstance(t, bool)
        ]
        if timeouts:
            approval["timeout_secs"] = min(timeouts)
        wanted, cap = definition.limits, self.limits
        limits = c.AgentLimits(
            tick_interval_ms=max(wanted.tick_interval_ms, cap.tick_interval_ms),
            fuel_per_tick=min(wanted.fuel_per_tick, cap.fuel_per_tick),
            memory_limit_mb=min(wanted.memory_limit_mb, cap.memory_limit_mb),
            tick_timeout_ms=min(wanted.tick_timeout_ms, cap.tick_timeout_ms),
        )
        models = [m for m in definition.inference_models if m in self.inference_models]
        return c.AgentDefinition(
            component=definition.component,
            sha256=definition.sha256,
            description=definition.description,
            capabilities=capabilities,
            approval=approval,
            limits=limits,
            mcp=definition.mcp and self.mcp,
            grant_domains=[d for d in definition.grant_domains if d in self.grant_domains],
            allow_hosts=[h for h in definition.allow_hosts if h in self.allow_hosts],
            # the models both name (none in common: this node's default model alone)
            inference_models=models,
            inference_default=definition.inference_default
            if definition.inference_default in models
            else None,
        )

    def refusal(
        self,
        definition: c.AgentDefinition,
        served: Iterable[str],
        owner: str | None = None,
        here: str | None = None,
    ) -> str | None:
        """Why this node (`here`) may not host `definition` of the agent `owner` owns (None: it
        may). An agent whose owner handed it to this node is this node's own: its decisions are
        this node's operator's."""
        if self.owner is not None and owner not in (self.owner, here):
            return (
                f"it is owned by {owner!r}, not {self.owner!r}, the owner its consent "
                f"({self.source}) names"
            )
        if self.components and definition.sha256 not in self.components:
            return f"its component {definition.sha256} is not one this node allows"
        domains = set(definition.grant_domains)
        unconsented = sorted(domains - self.grant_domains)
        if unconsented:
            return f"it asks for grant domains this node does not grant it: {unconsented}"
        unserved = sorted(domains - set(served))
        if unserved:
            return f"this node has no secrets for its grant domains {unserved}"
        return None


# how strict a gate is: absent (ungated) < "policy" (this node's policy set rules) < True (ask)
_STRICTNESS: dict[object, int] = {None: 0, False: 0, "policy": 1, True: 2}


def _gates(approval: Mapping[str, object]) -> dict[str, bool | str]:
    return {
        name: value
        for name, value in approval.items()
        if name != "timeout_secs" and value in (True, "policy")
    }


def operator_definition(deployed: DeployedAgent | None) -> c.AgentDefinition | None:
    """The latest definition an operator of this node deployed (not one a placement moved
    here: those are journaled without an operator)."""
    if deployed is None:
        return None
    for deployment in (deployed.current, *reversed(deployed.previous)):
        if deployment.operator:
            return deployment.definition
    return None


def consent_of(
    config: Config,
    declared: Iterable[AgentConfig],
    deployed: DeployedAgent | None,
    agent: str,
) -> Consent | None:
    """This node's consent to host `agent`, or None when its operator never gave one."""
    for entry in config.hosting:
        if entry.agent == agent:
            return Consent.of_hosting(entry)
    from node.services.definitions import definition_of  # services import placement lazily

    for declared_agent in declared:  # this node's own agent: its owner is this node
        if declared_agent.name == agent:
            return Consent.of_definition(
                "agents", definition_of(declared_agent, ""), config.node.name
            )
    definition = operator_definition(deployed)
    if definition is not None:
        return Consent.of_definition("deployed", definition, config.node.name)
    return None
