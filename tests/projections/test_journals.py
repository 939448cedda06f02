"""Journals: every stream seen, its head seq and its home (the origin of its first event)."""

from __future__ import annotations

from projections.catalogue import AgentDefinition, AgentLimits, AgentPlaced, event_of
from projections.journals import MAX_MOVES, Journals
from tests.projections.envelopes import Journal, envelope, fold, refolded_snapshot


def test_every_envelope_of_any_type_moves_its_streams_head() -> None:
    assert getattr(Journals, "handles", None) is None  # it folds every envelope
    j = Journal(origin="node-a")
    j.add("alice", "log", {})
    j.add("alice", "some.unknown.type", {})
    j.add("bob", "task.created", {"id": "t"})
    journals = fold(Journals(), j.envelopes)
    assert journals.head == {"alice": 2, "bob": 1}
    assert journals.home == {"alice": "node-a", "bob": "node-a"}


def test_the_home_is_the_origin_of_a_streams_first_event() -> None:
    """A replicated stream keeps the node that wrote it first as its home."""
    journals = fold(
        Journals(),
        [
            envelope("alice", 1, "log", {}, position=1, origin="node-a"),
            envelope("bob", 1, "log", {}, position=2, origin="node-b"),
            envelope("alice", 2, "log", {}, position=3, origin="node-b"),
        ],
    )
    assert journals.home_of("alice") == "node-a"
    assert journals.home_of("bob") == "node-b"
    assert journals.home_of("carol") is None
    assert journals.head == {"alice": 2, "bob": 1}


def test_the_head_is_the_seq_of_the_latest_envelope_folded() -> None:
    """The fold trusts global order: a lower seq later in position order becomes the head."""
    journals = Journals()
    journals.apply(envelope("alice", 5, "log", {}, position=1))
    journals.apply(envelope("alice", 3, "log", {}, position=2))
    assert journals.head == {"alice": 3}


def test_snapshot_is_sorted_and_refolds_equal() -> None:
    j = Journal(origin="node-z")
    for stream in ("carol", "alice", "bob", "alice"):
        j.add(stream, "log", {})
    journals = fold(Journals(), j.envelopes)
    snapshot = journals.snapshot()
    assert snapshot == {
        "home": {"alice": "node-z", "bob": "node-z", "carol": "node-z"},
        "owner": {"alice": "node-z", "bob": "node-z", "carol": "node-z"},
        "head": {"alice": 2, "bob": 1, "carol": 1},
        "epoch": {},
        "placement": {},
        "moves": {},
    }
    assert list(snapshot["head"]) == ["alice", "bob", "carol"]
    assert refolded_snapshot(journals, j.envelopes) == snapshot
    empty = {"home": {}, "owner": {}, "head": {}, "epoch": {}, "placement": {}, "moves": {}}
    assert Journals().snapshot() == empty


LIMITS = AgentLimits(tick_interval_ms=1, fuel_per_tick=1, memory_limit_mb=1, tick_timeout_ms=1)
DEFINITION = AgentDefinition(component="c.wasm", sha256="", limits=LIMITS)


def placed(*nodes: str) -> dict:
    return event_of(AgentPlaced(placement=list(nodes), definition=DEFINITION))[1]


def moving_journal() -> list:
    """alice: placed on a, b, c; handed off a → b (epoch 1); taken over by c (epoch 2)."""
    return [
        envelope("alice", 1, "agent.placed", placed("a", "b", "c"), position=1, origin="a"),
        envelope("alice", 2, "journal.handoff", {"to": "b", "epoch": 1}, position=2, origin="a"),
        envelope("alice", 3, "log", {}, position=3, origin="b"),
        envelope("bob", 1, "log", {}, position=4, origin="b"),
        envelope(
            "alice",
            4,
            "journal.takeover",
            {"epoch": 2, "lease_revision": 7, "previous_home": "b"},
            position=5,
            origin="c",
        ),
    ]


def test_handoffs_and_takeovers_move_the_home_and_raise_the_epoch() -> None:
    journals = fold(Journals(), moving_journal())
    assert journals.home_of("alice") == "c" and journals.epoch_of("alice") == 2
    assert journals.home_of("bob") == "b" and journals.epoch_of("bob") == 0
    assert journals.placement_of("alice") == ("a", "b", "c")
    assert journals.placement_of("bob") is None
    assert [
        (m["seq"], m["from"], m["to"], m["reason"], m["epoch"]) for m in journals.moves_of("alice")
    ] == [(2, "a", "b", "handoff", 1), (4, "b", "c", "takeover", 2)]
    assert journals.moves_of("bob") == []
    writers = [journals.writer_at("alice", seq) for seq in range(1, 6)]
    assert writers == ["a", "a", "b", "c", "c"]


def test_envelope_by_envelope_and_registry_folds_agree() -> None:
    """The registry folds moves through `apply_rare` and the rest through `apply_many`."""
    one_by_one = Journals()
    for e in moving_journal():
        one_by_one.apply(e)
    registry = fold(Journals(), moving_journal())
    assert one_by_one.snapshot() == registry.snapshot()
    batched_only = Journals()
    batched_only.apply_many(moving_journal())
    assert batched_only.epoch == {}  # apply_many leaves the moves to apply_rare


def test_a_move_that_does_not_raise_the_epoch_changes_nothing() -> None:
    stale = [
        envelope("alice", 1, "log", {}, position=1, origin="a"),
        envelope("alice", 2, "journal.handoff", {"to": "b", "epoch": 0}, position=2, origin="a"),
        envelope(
            "alice",
            3,
            "journal.takeover",
            {"epoch": 0, "lease_revision": 1, "previous_home": "a"},
            position=3,
            origin="x",
        ),
        envelope("alice", 4, "journal.handoff", {"to": 5}, position=4, origin="a"),  # malformed
    ]
    journals = fold(Journals(), stale)
    assert journals.home_of("alice") == "a" and journals.epoch_of("alice") == 0
    assert journals.moves_of("alice") == []


def test_the_move_history_keeps_the_newest_moves() -> None:
    envelopes = [envelope("alice", 1, "log", {}, position=1, origin="n0")]
    for i in range(1, MAX_MOVES + 6):
        data = {"to": f"n{i}", "epoch": i}
        envelopes.append(
            envelope("alice", i + 1, "journal.handoff", data, position=i + 1, origin=f"n{i - 1}")
        )
    journals = fold(Journals(), envelopes)
    moves = journals.moves_of("alice")
    assert len(moves) == MAX_MOVES
    assert moves[-1]["to"] == f"n{MAX_MOVES + 5}" and moves[0]["epoch"] == 6
