"""The peer book: pinned peer keys (first pin holds) and acknowledged heads, from `$peers`."""

from __future__ import annotations

from typing import Any

import pytest

from projections.peers import ACKED, KEY_PINNED, PEERS_STREAM, PeerBook
from tests.projections.envelopes import Journal, envelope, fold, refolded_snapshot


def test_a_pin_records_the_peers_key_and_the_first_pin_holds() -> None:
    j = Journal()
    j.add(PEERS_STREAM, KEY_PINNED, {"peer": "node-b", "public_key": "key-1"})
    j.add(PEERS_STREAM, KEY_PINNED, {"peer": "node-b", "public_key": "key-2"})  # refused
    j.add(PEERS_STREAM, KEY_PINNED, {"peer": "node-c", "public_key": "key-3"})
    book = fold(PeerBook(), j.envelopes)
    assert book.pins == {"node-b": "key-1", "node-c": "key-3"}


@pytest.mark.parametrize(
    "data", [{}, {"peer": "node-b"}, {"peer": 1, "public_key": "k"}, {"peer": "b", "public_key": 2}]
)
def test_a_malformed_pin_is_ignored(data: dict[str, Any]) -> None:
    book = fold(PeerBook(), [envelope(PEERS_STREAM, 1, KEY_PINNED, data, position=1)])
    assert book.pins == {}


def test_acks_merge_per_peer_and_stream_and_a_later_ack_replaces() -> None:
    j = Journal()
    j.add(PEERS_STREAM, ACKED, {"peer": "node-b", "heads": {"alice": 3, "bob": 1}})
    j.add(PEERS_STREAM, ACKED, {"peer": "node-b", "heads": {"alice": 5}})
    j.add(PEERS_STREAM, ACKED, {"peer": "node-c", "heads": {"alice": 2}})
    j.add(PEERS_STREAM, ACKED, {"peer": "node-c", "heads": {"alice": 1}})  # the latest wins
    book = fold(PeerBook(), j.envelopes)
    assert book.acked("node-b", "alice") == 5
    assert book.acked("node-b", "bob") == 1
    assert book.acked("node-c", "alice") == 1
    assert book.acked("node-b", "carol") == 0  # never acked: 0
    assert book.acked("node-x", "alice") == 0


def test_malformed_acks_and_heads_are_ignored() -> None:
    j = Journal()
    j.add(PEERS_STREAM, ACKED, {"heads": {"alice": 1}})  # no peer
    j.add(PEERS_STREAM, ACKED, {"peer": "node-b", "heads": [1, 2]})  # heads not a map
    j.add(PEERS_STREAM, ACKED, {"peer": "node-b", "heads": {"alice": "3", "bob": 2, "c": None}})
    book = fold(PeerBook(), j.envelopes)
    assert book.acks == {"node-b": {"bob": 2}}


def test_only_the_peers_journal_counts() -> None:
    """Pins and acks in an agent's (replicated) journal must not change what this node trusts."""
    j = Journal()
    j.add("alice", KEY_PINNED, {"peer": "node-b", "public_key": "evil"})
    j.add("alice", ACKED, {"peer": "node-b", "heads": {"alice": 9}})
    book = fold(PeerBook(), j.envelopes)
    assert (book.pins, book.acks) == ({}, {})


def test_other_event_types_change_nothing() -> None:
    book = PeerBook()
    book.apply(envelope(PEERS_STREAM, 1, "log", {"peer": "b", "public_key": "k"}, position=1))
    assert book.snapshot() == PeerBook().snapshot()
    assert book.handles == frozenset({KEY_PINNED, ACKED})


def test_snapshot_is_sorted_and_refolds_equal() -> None:
    j = Journal()
    j.add(PEERS_STREAM, KEY_PINNED, {"peer": "node-c", "public_key": "kc"})
    j.add(PEERS_STREAM, KEY_PINNED, {"peer": "node-b", "public_key": "kb"})
    j.add(PEERS_STREAM, ACKED, {"peer": "node-c", "heads": {"zed": 1, "alice": 4}})
    j.add(PEERS_STREAM, ACKED, {"peer": "node-b", "heads": {"alice": 2}})
    book = fold(PeerBook(), j.envelopes)
    snapshot = book.snapshot()
    assert snapshot == {
        "pins": {"node-b": "kb", "node-c": "kc"},
        "acks": {"node-b": {"alice": 2}, "node-c": {"alice": 4, "zed": 1}},
    }
    assert list(snapshot["acks"]["node-c"]) == ["alice", "zed"]
    assert refolded_snapshot(book, j.envelopes) == snapshot
