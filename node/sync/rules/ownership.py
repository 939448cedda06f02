"""Which journals a peer may never write here, and who may start a new journal.

A journal's home is the node that wrote its seq 1 (projections/journals.py), and only the home
appends to it. This node is the home of its node journal (named after the node), of every
configured agent (loaded, still compiling, or never started) and of every journal it has
written, so a peer can neither create nor extend any of them. A journal named after a
configured peer is that peer's node journal: only that peer may start it. Any other new journal
is started by whoever signs its seq 1, provided that origin's key is pinned here (a configured
peer); envelopes of a third node relayed by a peer are judged the same way, by their origin's
key and the journal's home, never by who pushed them.

A journal that moved (a handoff or takeover raised its epoch: docs/mesh.md, "Placement and
failover") is this node's only while this node is its current home: once it moved away, even
a configured agent's journal is a replica here, written by its new home.
"""

from __future__ import annotations

from node.context import NodeContext
from projections.journals import Journals

OWN_JOURNAL = "own_journal"


class Ownership:
    def __init__(self, ctx: NodeContext) -> None:
        self._ctx = ctx
        self._agents_of: object = None  # the config's agent list the name set was made from
        self._agent_names: frozenset[str] = frozenset()

    def home_of(self, stream: str) -> str | None:
        return self._ctx.projections.get(Journals).home_of(stream)

    def refuse(self, stream: str, moved_to: str | None = None) -> str | None:
        """Why no peer may write `stream` on this node, or None when one may. `moved_to`: the
        home a move screened but not yet folded gives the journal."""
        ctx = self._ctx
        if stream == ctx.name:
            return f"{stream!r} is this node's own journal"
        journals = self._ctx.projections.get(Journals)
        home = moved_to or journals.home_of(stream)
        moved = moved_to is not None or journals.epoch_of(stream) > 0
        if stream in self._configured_agents() and not (moved and home != ctx.name):
            return f"{stream!r} is an agent configured on this node"
        if home == ctx.name:
            return f"{stream!r} is a journal this node writes"
        return None

    def _configured_agents(self) -> frozenset[str]:
        """Names of the configured agents (a set: a push checks up to 10,000 envelopes)."""
        agents = self._ctx.config.agents
        if agents is not self._agents_of:
            self._agents_of, self._agent_names = agents, frozenset(a.name for a in agents)
        return self._agent_names

    def refuse_home(self, stream: str, origin: str) -> str | None:
        """Why `origin` may not start the new journal `stream`, or None when it may."""
        if origin != stream and any(p.name == stream for p in self._ctx.config.peers):
            return f"{stream!r} is the node journal of peer {stream!r}; {origin!r} cannot start it"
        return None
