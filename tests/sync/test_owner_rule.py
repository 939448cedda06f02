"""The owner rule (node/sync/rules/owner.py): only the agent's owner (the signer of its seq 1,
or whom it handed the agent to) signs what changes what runs; a pure function of the journals
projection and one envelope, on real signed envelopes."""

from __future__ import annotations

from node.sync.rules.owner import OWNER_DECISIONS, refusal
from projections.catalogue import AgentDefinition, AgentLimits, AgentPlaced, event_of
from projections.journals import Journals
from tests.projections.envelopes import envelope, fold

LIMITS = AgentLimits(
    tick_interval_ms=100, fuel_per_tick=1000, memory_limit_mb=64, tick_timeout_ms=1000
)
DEFINITION = AgentDefinition(component="registry:c@1.0.0", sha256="", limits=LIMITS)


def placed(placement: list[str]) -> dict:
    return event_of(AgentPlaced(placement=placement, definition=DEFINITION))[1]


def journal() -> Journals:
    """node-a deploys `w` on [node-a, node-m], hands it to node-m (a set member)."""
    return fold(
        Journals(),
        [
            envelope(
                "w", 1, "agent.placed", placed(["node-a", "node-m"]), position=1, origin="node-a"
            ),
            envelope(
                "w", 2, "journal.handoff", {"to": "node-m", "epoch": 1}, position=2, origin="node-a"
            ),
        ],
    )


def test_the_first_signer_owns_the_journal_and_a_home_is_not_its_owner():
    journals = journal()
    assert journals.owner_of("w") == "node-a" and journals.home_of("w") == "node-m"
    for kind in sorted(OWNER_DECISIONS):
        data = placed(["node-m"]) if kind == "agent.placed" else {"to": "node-m"}
        made = envelope("w", 3, kind, data, position=3, origin="node-m")
        why = refusal(journals, "w", 3, made.event)
        assert (
            why == f"{kind} of w at seq 3 is signed by 'node-m', not by the agent's owner 'node-a'"
        )
    for kind, data in (("state.set", {"key": "k", "value": 1}), ("log", {}), ("finding", {})):
        assert (
            refusal(
                journals, "w", 3, envelope("w", 3, kind, data, position=3, origin="node-m").event
            )
            is None
        )


def test_the_owner_decides_keeps_itself_in_the_set_and_hands_ownership_inside_it():
    journals = journal()
    own = envelope(
        "w", 3, "agent.placed", placed(["node-a", "node-c"]), position=3, origin="node-a"
    )
    assert refusal(journals, "w", 3, own.event) is None
    dropped = envelope("w", 3, "agent.placed", placed(["node-c"]), position=3, origin="node-a")
    assert "drops its owner 'node-a'" in refusal(journals, "w", 3, dropped.event)
    outside = envelope("w", 3, "agent.owner_handed", {"to": "node-z"}, position=3, origin="node-a")
    assert "outside its placement set" in refusal(journals, "w", 3, outside.event)
    handed = envelope("w", 3, "agent.owner_handed", {"to": "node-m"}, position=3, origin="node-a")
    assert refusal(journals, "w", 3, handed.event) is None
    fold(journals, [handed])
    assert journals.owner_of("w") == "node-m"
    mine = envelope("w", 4, "agent.halted", {}, position=4, origin="node-m")
    assert refusal(journals, "w", 4, mine.event) is None
    theirs = envelope("w", 4, "agent.halted", {}, position=4, origin="node-a")
    assert "not by the agent's owner 'node-m'" in refusal(journals, "w", 4, theirs.event)


def test_a_new_journal_is_owned_by_whoever_signs_its_seq_1():
    first = envelope("new", 1, "agent.placed", placed(["node-x"]), position=1, origin="node-x")
    assert refusal(Journals(), "new", 1, first.event) is None
    assert fold(Journals(), [first]).owner_of("new") == "node-x"
