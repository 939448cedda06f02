"""What each placed agent's own journal says it runs, and what its operators decided.

`agent.placed` (appended by an agent's home when a placed agent is deployed, upgraded, rolled
back or re-placed) carries the definition a new home starts, and the deployment it follows
(revision, change, operator, the node that made it: `history`); `agent.moved_in` says a new
home started it in an epoch; `agent.halted` and `agent.unhalted` are an operator's stop and
start, `agent.retired` its removal. All are replicated with the agent's journal, so every
node of a placement set knows what to run, whether an operator stopped it, and that a removed
agent never runs again (node/placement/manager.py), whichever node was home when it was said.
"""

from __future__ import annotations

import builtins
from typing import Any

import msgspec

from eventstore.envelope import Envelope
from projections import catalogue as c

AGENT_PLACED = c.AGENT_PLACED
AGENT_MOVED_IN = c.AGENT_MOVED_IN
MAX_HISTORY = 20  # deployments kept per agent (the journal keeps them all)


class PlacedChange(msgspec.Struct, kw_only=True):
    """One `agent.placed`: which deployment of which node, by whom."""

    seq: int
    revision: int
    change: str
    operator: str | None
    node: str
    component: str
    sha256: str
    at: str


class Placed(msgspec.Struct, kw_only=True):
    """The latest `agent.placed` of one agent, the epoch its latest `agent.moved_in` names
    (-1: none yet), and its operators' decisions since."""

    agent: str
    placement: tuple[str, ...]
    definition: c.AgentDefinition
    placed_seq: int
    moved_in_epoch: int = -1
    revision: int = 0
    # the highest revision its journal named since its last deployment anew: the next
    # upgrade's is one more, on whichever node is home (revisions are the journal's)
    last_revision: int = 0
    stopped_by: str | None = None  # an operator's stop (`agent.halted`), until `agent.unhalted`
    stopped: bool = False
    retired: bool = False  # removed: it runs nowhere again (a new deployment places it anew)
    history: list[PlacedChange] = msgspec.field(default_factory=list)
    # the definition an upgrade prepares (`agent.preparing`) until an `agent.placed` follows
    preparing: c.AgentDefinition | None = None
    # the definition it ran before its latest change of definition: a node not ready on the
    # new one yet stands by on this one (node/placement/hosting.py, `runnable`)
    previous: c.AgentDefinition | None = None

    def revision_of(self, definition: c.AgentDefinition) -> int:
        """The revision the journal names for `definition`: the latest one's, or that of the
        newest deployment of its component in the history kept (a takeover that runs the
        version before an upgrade still in preparation); 0 when it names none."""
        if definition == self.definition:
            return self.revision
        for change in reversed(self.history):
            if change.sha256 == definition.sha256 and change.component == definition.component:
                return change.revision
        return 0


def _previous(before: Placed | None, definition: c.AgentDefinition) -> c.AgentDefinition | None:
    """What ran before an `agent.placed` naming `definition`: the definition it replaces, or
    (the same definition again: a change of set only) the one before that."""
    if before is None:
        return None
    return before.definition if before.definition != definition else before.previous


class Placements:
    name = "placements"
    handles = frozenset(
        {
            AGENT_PLACED,
            AGENT_MOVED_IN,
            c.AGENT_HALTED,
            c.AGENT_UNHALTED,
            c.AGENT_RETIRED,
            c.AGENT_PREPARING,
        }
    )

    def __init__(self) -> None:
        self.agents: dict[str, Placed] = {}

    def apply(self, envelope: Envelope) -> None:
        kind, data = envelope.event.type, envelope.event.data
        if kind == AGENT_PLACED:
            self._placed(envelope)
            return
        agent = self.agents.get(envelope.stream)
        if agent is None:
            return
        if kind == AGENT_MOVED_IN:
            moved = c.read(c.AgentMovedIn, data)
            if moved is not None:
                agent.moved_in_epoch = max(agent.moved_in_epoch, moved.epoch)
        elif kind == c.AGENT_HALTED:
            halted = c.read(c.AgentHalted, data)
            if halted is not None:
                agent.stopped, agent.stopped_by = True, halted.operator
        elif kind == c.AGENT_UNHALTED:
            if c.read(c.AgentUnhalted, data) is not None:
                agent.stopped, agent.stopped_by = False, None
        elif kind == c.AGENT_RETIRED:
            agent.retired = True
        elif kind == c.AGENT_PREPARING:
            preparing = c.read(c.AgentPreparing, data)
            if preparing is not None and not agent.retired:
                agent.preparing = preparing.definition

    def _placed(self, envelope: Envelope) -> None:
        placed = c.read(c.AgentPlaced, envelope.event.data)
        if placed is None:
            return
        before = self.agents.get(envelope.stream)
        carried = before is not None and not before.retired
        history = list(before.history) if carried else []  # type: ignore[union-attr]
        history.append(
            PlacedChange(
                seq=envelope.seq,
                revision=placed.revision,
                change=placed.change,
                operator=placed.operator,
                node=envelope.event.origin,
                component=placed.definition.component,
                sha256=placed.definition.sha256,
                at=envelope.event.ts,
            )
        )
        self.agents[envelope.stream] = Placed(
            agent=envelope.stream,
            placement=tuple(placed.placement),
            definition=placed.definition,
            placed_seq=envelope.seq,
            moved_in_epoch=before.moved_in_epoch if before else -1,
            revision=placed.revision,
            last_revision=max(before.last_revision if carried else 0, placed.revision),  # type: ignore[union-attr]
            stopped=before.stopped if carried else False,  # type: ignore[union-attr]
            stopped_by=before.stopped_by if carried else None,  # type: ignore[union-attr]
            history=history[-MAX_HISTORY:],
            previous=_previous(before, placed.definition) if carried else None,
        )

    def get(self, agent: str) -> Placed | None:
        """The agent's placement, unless it was removed since."""
        placed = self.agents.get(agent)
        return placed if placed is not None and not placed.retired else None

    def next_revision(self, agent: str, local_last: int) -> int:
        """The revision of an upgrade of `agent` now: one more than any its journal named
        (and than `local_last`, the node's own last), so every home numbers alike."""
        placed = self.get(agent)
        return max(local_last, placed.last_revision if placed is not None else 0) + 1

    def placed_on(self, node: str) -> builtins.list[Placed]:
        """The agents placed on more than one node, `node` among them (never a removed one)."""
        return [
            p
            for p in self.agents.values()
            if len(p.placement) > 1 and node in p.placement and not p.retired
        ]

    def snapshot(self) -> builtins.list[Any]:
        return [msgspec.to_builtins(self.agents[a]) for a in sorted(self.agents)]
