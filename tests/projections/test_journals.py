"""Journals: every stream seen, its head seq and its home (the origin of its first event)."""

from __future__ import annotations

from projections.journals import Journals
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
        "head": {"alice": 2, "bob": 1, "carol": 1},
    }
    assert list(snapshot["head"]) == ["alice", "bob", "carol"]
    assert refolded_snapshot(journals, j.envelopes) == snapshot
    assert Journals().snapshot() == {"home": {}, "head": {}}
