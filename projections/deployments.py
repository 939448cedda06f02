"""The agents this node runs, as its `$node` journal's lifecycle events say.

Each agent has its current deployment (revision, definition, where it came from: runtime.toml
or the API), the deployments below it that a rollback returns to (a stack: an upgrade pushes,
a rollback pops), whether an operator suspended it, and a bounded history of what happened.
`agent.removed` forgets the agent (its own journal stays). The fold trusts only `$node`: the
events are never replicated, and an agent's journal cannot deploy anything.
"""

from __future__ import annotations

import builtins
from typing import Any, Literal

import msgspec

from eventstore.envelope import Envelope
from projections import catalogue as c

NODE_STREAM = "$node"
MAX_ROLLBACK_DEPTH = 20  # deployments kept below the current one
MAX_HISTORY = 100  # history entries kept per agent (the journal keeps them all)

HistoryKind = Literal["deployed", "upgraded", "rolled_back", "suspended", "resumed"]


class Deployment(msgspec.Struct, kw_only=True):
    revision: int
    source: c.DeploymentSource
    definition: c.AgentDefinition
    deployed_at: str
    operator: str | None = None

    @property
    def version(self) -> str | None:
        """The registry version of the component, None for a file."""
        return component_version(self.definition.component)


class HistoryEntry(msgspec.Struct, kw_only=True, omit_defaults=True):
    event: HistoryKind
    at: str
    revision: int | None = None
    component: str | None = None
    sha256: str | None = None
    operator: str | None = None
    reason: str | None = None
    automatic: bool = False


class DeployedAgent(msgspec.Struct, kw_only=True):
    name: str
    current: Deployment
    previous: list[Deployment] = msgspec.field(default_factory=list)  # newest last
    suspended: bool = False
    last_revision: int = 0  # revisions only grow, also past a rollback
    history: list[HistoryEntry] = msgspec.field(default_factory=list)  # oldest first

    @property
    def source(self) -> c.DeploymentSource:
        return self.current.source

    def record(self, entry: HistoryEntry) -> None:
        self.history.append(entry)
        del self.history[:-MAX_HISTORY]


def component_version(component: str) -> str | None:
    if not component.startswith("registry:") or "@" not in component:
        return None
    return component.rpartition("@")[2]


class DeployedAgents:
    name = "deployments"
    handles = frozenset(
        {
            c.AGENT_DEPLOYED,
            c.AGENT_UPGRADED,
            c.AGENT_ROLLED_BACK,
            c.AGENT_SUSPENDED,
            c.AGENT_RESUMED,
            c.AGENT_REMOVED,
        }
    )

    def __init__(self) -> None:
        self.agents: dict[str, DeployedAgent] = {}

    def apply(self, envelope: Envelope) -> None:
        if envelope.stream != NODE_STREAM:
            return
        kind, data, ts = envelope.event.type, envelope.event.data, envelope.event.ts
        if kind in (c.AGENT_DEPLOYED, c.AGENT_UPGRADED):
            self._deploy(kind, data, ts)
        elif kind == c.AGENT_ROLLED_BACK:
            self._roll_back(data, ts)
        elif kind in (c.AGENT_SUSPENDED, c.AGENT_RESUMED):
            self._suspend(kind, data, ts)
        elif kind == c.AGENT_REMOVED:
            removed = c.read(c.AgentRemoved, data)
            if removed is not None:
                self.agents.pop(removed.agent, None)

    def _deploy(self, kind: str, data: dict[str, Any], ts: str) -> None:
        cls: type[c.AgentDeployed | c.AgentUpgraded]
        cls = c.AgentDeployed if kind == c.AGENT_DEPLOYED else c.AgentUpgraded
        event = c.read(cls, data)
        if event is None:
            return
        deployment = Deployment(
            revision=event.revision,
            source=event.source,
            definition=event.definition,
            deployed_at=ts,
            operator=event.operator,
        )
        agent = self.agents.get(event.agent)
        if agent is None or kind == c.AGENT_DEPLOYED:
            agent = self.agents[event.agent] = DeployedAgent(
                name=event.agent, current=deployment, history=agent.history if agent else []
            )
        else:
            agent.previous.append(agent.current)
            del agent.previous[:-MAX_ROLLBACK_DEPTH]
            agent.current = deployment
        agent.last_revision = max(agent.last_revision, event.revision)
        agent.record(
            HistoryEntry(
                event="deployed" if kind == c.AGENT_DEPLOYED else "upgraded",
                at=ts,
                revision=event.revision,
                component=event.definition.component,
                sha256=event.definition.sha256,
                operator=event.operator,
            )
        )

    def _roll_back(self, data: dict[str, Any], ts: str) -> None:
        event = c.read(c.AgentRolledBack, data)
        if event is None:
            return
        agent = self.agents.get(event.agent)
        if agent is None or not agent.previous or agent.previous[-1].revision != event.to_revision:
            return  # does not fit the state: the writer checks the same before journaling
        agent.current = agent.previous.pop()
        agent.record(
            HistoryEntry(
                event="rolled_back",
                at=ts,
                revision=event.to_revision,
                component=agent.current.definition.component,
                sha256=agent.current.definition.sha256,
                operator=event.operator,
                reason=event.reason or None,
                automatic=event.automatic,
            )
        )

    def _suspend(self, kind: str, data: dict[str, Any], ts: str) -> None:
        cls: type[c.AgentSuspended | c.AgentResumed]
        cls = c.AgentSuspended if kind == c.AGENT_SUSPENDED else c.AgentResumed
        event = c.read(cls, data)
        agent = self.agents.get(event.agent) if event is not None else None
        if event is None or agent is None:
            return
        agent.suspended = kind == c.AGENT_SUSPENDED
        agent.record(
            HistoryEntry(
                event="suspended" if agent.suspended else "resumed",
                at=ts,
                operator=event.operator,
            )
        )

    # ------------------------------------------------------------------ reads
    def get(self, name: str) -> DeployedAgent | None:
        return self.agents.get(name)

    def list(self) -> builtins.list[DeployedAgent]:
        return [self.agents[name] for name in sorted(self.agents)]

    def next_revision(self, name: str) -> int:
        agent = self.agents.get(name)
        return 1 if agent is None else agent.last_revision + 1

    def snapshot(self) -> builtins.list[Any]:
        return [msgspec.to_builtins(a) for a in self.list()]
