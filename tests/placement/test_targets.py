"""Drain and move targets (issue 51 item 3, issue 52 item 3): the operator's set and fresh
adverts decide; a member's claim of free slots never picks a node, a draining one is never
picked. Property-based: adverts are what any member of the mesh may write."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from node.placement.adverts import MAX_SLOTS, Advert
from node.placement.targets import ready_targets, refusal_of_target

NODES = [f"node-{c}" for c in "abcdef"]
AGENT = "worker"
CURRENT, BEFORE = f"{AGENT}=sha256:{'2' * 64}", f"{AGENT}=sha256:{'1' * 64}"

adverts = st.dictionaries(
    st.sampled_from(NODES),
    st.tuples(st.booleans(), st.integers(0, MAX_SLOTS), st.booleans(), st.booleans()),
)
sets = st.lists(st.sampled_from(NODES), min_size=1, max_size=6, unique=True)


def live_of(raw: dict[str, tuple[bool, int, bool, bool]]) -> dict[str, Advert]:
    return {
        node: Advert(
            node,
            [AGENT] if hosts else [],
            slots,
            0.0,
            draining=draining,
            prepared=[CURRENT if current else BEFORE],
        )
        for node, (hosts, slots, draining, current) in raw.items()
    }


@settings(max_examples=200, deadline=None)
@given(sets, st.sampled_from(NODES), adverts, st.data())
def test_targets_are_fresh_ready_members_in_the_sets_order(placement, here, raw, data):
    live = live_of(raw)
    chosen = ready_targets(AGENT, placement, here, live, CURRENT)
    for node in chosen:
        assert node in placement and node != here
        assert AGENT in live[node].hosts and not live[node].draining
    expected = {n for n in placement if n != here and n in raw and raw[n][0] and not raw[n][2]}
    assert set(chosen) == expected
    # every node ready on the current definition comes before every one on the version before
    on_current = [CURRENT in live[node].prepared for node in chosen]
    assert on_current == sorted(on_current, reverse=True)
    # any member's claim of more free slots (one or more) changes nothing of the order
    boosted = {
        node: (hosts, slots if slots == 0 else data.draw(st.integers(1, MAX_SLOTS)), *rest)
        for node, (hosts, slots, *rest) in raw.items()
    }
    assert ready_targets(AGENT, placement, here, live_of(boosted), CURRENT) == chosen


def test_a_node_ready_on_the_current_version_comes_before_the_next_one_of_the_set():
    live = {
        "node-b": Advert("node-b", [AGENT], 1, prepared=[BEFORE]),  # still compiling it
        "node-c": Advert("node-c", [AGENT], 1, prepared=[BEFORE, CURRENT]),
    }
    assert ready_targets(AGENT, ["node-a", "node-b", "node-c"], "node-a", live, CURRENT) == [
        "node-c",
        "node-b",
    ]
    # once both are, the set's order decides again
    live["node-b"] = Advert("node-b", [AGENT], 1, prepared=[CURRENT])
    assert ready_targets(AGENT, ["node-a", "node-b", "node-c"], "node-a", live, CURRENT) == [
        "node-b",
        "node-c",
    ]


def test_the_next_node_of_the_set_comes_first_whatever_another_claims():
    live = {
        "node-b": Advert("node-b", [AGENT], 1),
        "node-x": Advert("node-x", [AGENT], MAX_SLOTS),
        "node-c": Advert("node-c", [AGENT], 0),
    }
    assert ready_targets(AGENT, ["node-a", "node-b", "node-x", "node-c"], "node-a", live) == [
        "node-b",
        "node-x",
        "node-c",  # no free slot: last
    ]
    assert ready_targets(AGENT, ["node-a", "node-b"], "node-a", live) == ["node-b"]  # the set


def test_a_move_to_a_draining_or_silent_node_is_refused_saying_why():
    assert "draining" in str(refusal_of_target(AGENT, "node-b", Advert("node-b", draining=True)))
    assert "no fresh advert" in str(refusal_of_target(AGENT, "node-b", None))
    assert refusal_of_target(AGENT, "node-b", Advert("node-b", [AGENT], 3)) is None
