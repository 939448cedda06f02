"""Which node a drain hands an agent to, and which nodes a move may name.

A target is a node the operator's placement set lists (not this one) whose advert is fresh,
says it is ready to host the agent and is not draining. Among those, the set's own order
decides (from the node after this one, round the set), so the operator's list, not a
member's claim, picks the node: `free_slots` is a tie-break only in that a node with none
comes after those with some. A hostile member advertising 100,000 free slots is no likelier
to be picked than an honest one with 1 (issue 51 item 3).

One claim does rank first: being ready on the agent's current definition (its key in the
advert's `prepared`). Right after an upgrade switched, a node of the set may still stand by on
the version before (its `hosts` lists the agent either way); a drain then hands the agent to
one that compiled the new version, as the upgrade waited for, and not to one that would run
the old version until it has compiled the new. A liar gains nothing by it that `hosts` does
not already give it: it is a member the operator listed, and a member ready on the current
version that tells the truth ranks beside it in the set's order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from node.placement.adverts import Advert


def ready_targets(
    agent: str,
    placement: Sequence[str],
    this_node: str,
    live: Mapping[str, Advert],
    current: str | None = None,
) -> list[str]:
    """The set's members ready to take `agent` now, in the order a drain tries them; those
    whose `prepared` names `current` (the agent's definition key) first."""
    members = list(dict.fromkeys(placement))
    start = members.index(this_node) + 1 if this_node in members else 0
    ring = members[start:] + members[:start]
    ready = [
        node
        for node in ring
        if node != this_node
        and (advert := live.get(node)) is not None
        and advert.node == node
        and not advert.draining
        and agent in advert.hosts
    ]
    # stable: the set's order among nodes ready on the current definition with a free slot,
    # then those without one, then the same for nodes on the version before
    return sorted(
        ready,
        key=lambda node: (current not in live[node].prepared, live[node].free_slots == 0),
    )


def refusal_of_target(agent: str, to: str, advert: Advert | None) -> str | None:
    """Why a move of `agent` may not go to `to` (a 409's detail), or None."""
    if advert is None:
        return f"node {to!r} has no fresh advert: it is not connected"
    if advert.draining:
        return f"node {to!r} is draining or drained: it takes no placed agent until it restarts"
    return None
