"""The owner decides, the home runs: who may sign what an honest node runs of an agent.

An agent's **owner** is the node that signed its journal's seq 1 (it deployed the agent), or
the node its owner named in an `agent.owner_handed` (projections/journals.py `owner_of`). Only
the owner's signature changes what runs: the definition and the placement set
(`agent.placed`), whether it runs (`agent.halted`, `agent.unhalted`, `agent.retired`) and who
the owner is (`agent.owner_handed`). A home that is not the owner writes the agent's runtime
events only (state, tasks, findings, logs, approvals, grants as its definition asks, moves).

Why the first signer and not an operator key in config: the first signer is a fact every
node reads alike from the journal itself (no key to distribute, nothing a member's config can
claim), and its key is already pinned on every node. docs/mesh.md, "The owner decides, the
home runs", says what that costs (an owner gone for good freezes the definition).

`refusal` is a pure function of the journal state (the journals projection) and one envelope's
event, so the receive path (node/sync/rules/screening.py) and the model of the receive rules
call the very same rule.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from eventstore.envelope import Event
from projections.catalogue import (
    AGENT_HALTED,
    AGENT_OWNER_HANDED,
    AGENT_PLACED,
    AGENT_RETIRED,
    AGENT_UNHALTED,
    AgentOwnerHanded,
    AgentPlaced,
    read,
)
from projections.journals import Journals

# the events that change what runs, where and whether: the owner's alone
OWNER_DECISIONS = frozenset(
    {AGENT_PLACED, AGENT_HALTED, AGENT_UNHALTED, AGENT_RETIRED, AGENT_OWNER_HANDED}
)
NOT_OWNER = "not_owner"  # the rejection's reason (docs/mesh.md, the push's reasons)


class JournalState(Protocol):
    """What the rule reads of a journal: projections.journals.Journals has it."""

    def owner_of(self, stream: str) -> str | None: ...

    def placement_of(self, stream: str) -> tuple[str, ...] | None: ...


def refusal(journals: JournalState, stream: str, seq: int, event: Event) -> str | None:
    """Why `event`, at `seq` of `stream` after what `journals` folded, may not be stored
    (None: it may). Only owner decisions are judged; every other type passes."""
    if event.type not in OWNER_DECISIONS:
        return None
    owner = journals.owner_of(stream)
    if owner is None:
        if seq != 1:
            return None  # a journal not held here: its seq 1 is a gap first
        owner = event.origin  # a new journal: whoever signs seq 1 owns it
    where = f"{event.type} of {stream} at seq {seq}"
    if event.origin != owner:
        return f"{where} is signed by {event.origin!r}, not by the agent's owner {owner!r}"
    if event.type == AGENT_PLACED:
        placed = read(AgentPlaced, event.data)
        if placed is not None and owner not in placed.placement:
            return f"{where}: its placement set {placed.placement} drops its owner {owner!r}"
    elif event.type == AGENT_OWNER_HANDED:
        handed = read(AgentOwnerHanded, event.data)
        placement = journals.placement_of(stream) or (owner,)
        if handed is not None and handed.to not in placement:
            return f"{where}: it hands the agent to {handed.to!r}, outside its placement set"
    return None


def finding_of(stream: str, signer: str, detail: str) -> tuple[str, str, str]:
    """The incident (key, title, detail) a refused decision is reported as: once per journal
    and signer, naming the signer (whose signature was checked before: receive.py)."""
    return (
        f"not-owner/{stream}/{signer}",
        f"refused change of agent {stream} by node {signer}, not its owner",
        detail,
    )


class Screened:
    """The journal state an envelope at `seq` is screened against, as `refusal` reads it: the
    journals projection, the journals the batch starts (`new_homes`: their seq 1's signer),
    owners handed by envelopes screened but not folded yet (`handed`: journal → (seq, owner),
    counted for a later seq while the projection's head is below theirs), and placements
    likewise (`placement_of`)."""

    def __init__(
        self,
        journals: Journals,
        seq: int,
        new_homes: Mapping[str, str],
        handed: Mapping[str, tuple[int, str]],
        placement_of: Callable[[str], tuple[str, ...] | None],
    ) -> None:
        self._journals, self._seq, self._new, self._handed = journals, seq, new_homes, handed
        self.placement_of = placement_of

    def owner_of(self, stream: str) -> str | None:
        noted = self._handed.get(stream)
        if (
            noted is not None
            and noted[0] < self._seq
            and self._journals.head.get(stream, 0) < noted[0]
        ):
            return noted[1]
        return self._journals.owner_of(stream) or self._new.get(stream)


def screen(
    state: Screened, handed: dict[str, tuple[int, str]], stream: str, seq: int, event: Event
) -> str | None:
    """`refusal` for the receive path; an `agent.owner_handed` it lets through is noted in
    `handed` for the envelopes screened after it."""
    why = refusal(state, stream, seq, event)
    if why is None and event.type == AGENT_OWNER_HANDED:
        passed = read(AgentOwnerHanded, event.data)
        if passed is not None:
            handed[stream] = (seq, passed.to)
    return why
