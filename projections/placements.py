"""What each placed agent's own journal says it runs and who last started it there.

`agent.placed` (appended by an agent's home when a placed agent is deployed, upgraded, rolled
back or re-placed) carries the definition a new home starts; `agent.moved_in` says a new home
started it in an epoch. Both are replicated with the agent's journal, so every node of a
placement set knows what to run (node/placement/manager.py). The event types are read by name
and their data checked here, so this read model needs nothing else of the catalogue.
"""

from __future__ import annotations

import builtins
from typing import Any

import msgspec

from eventstore.envelope import Envelope
from projections import catalogue as c

AGENT_PLACED = c.AGENT_PLACED
AGENT_MOVED_IN = c.AGENT_MOVED_IN


class Placed(msgspec.Struct, kw_only=True):
    """The latest `agent.placed` of one agent, and the epoch its latest `agent.moved_in` names
    (-1: none yet)."""

    agent: str
    placement: tuple[str, ...]
    definition: c.AgentDefinition
    placed_seq: int
    moved_in_epoch: int = -1


class Placements:
    name = "placements"
    handles = frozenset({AGENT_PLACED, AGENT_MOVED_IN})

    def __init__(self) -> None:
        self.agents: dict[str, Placed] = {}

    def apply(self, envelope: Envelope) -> None:
        kind, data = envelope.event.type, envelope.event.data
        if kind == AGENT_PLACED:
            placed = c.read(c.AgentPlaced, data)
            if placed is not None:
                before = self.agents.get(envelope.stream)
                self.agents[envelope.stream] = Placed(
                    agent=envelope.stream,
                    placement=tuple(placed.placement),
                    definition=placed.definition,
                    placed_seq=envelope.seq,
                    moved_in_epoch=before.moved_in_epoch if before else -1,
                )
        elif kind == AGENT_MOVED_IN:
            moved = c.read(c.AgentMovedIn, data)
            agent = self.agents.get(envelope.stream)
            if moved is not None and agent is not None:
                agent.moved_in_epoch = max(agent.moved_in_epoch, moved.epoch)

    def get(self, agent: str) -> Placed | None:
        return self.agents.get(agent)

    def placed_on(self, node: str) -> builtins.list[Placed]:
        """The agents placed on more than one node, `node` among them."""
        return [p for p in self.agents.values() if len(p.placement) > 1 and node in p.placement]

    def snapshot(self) -> builtins.list[Any]:
        return [msgspec.to_builtins(self.agents[a]) for a in sorted(self.agents)]
