"""Logs and findings: entries numbered 1, 2, 3... in global order, polled by `seq`."""

from __future__ import annotations

from typing import Any

import pytest

from projections.disk import DiskModels
from projections.entries import Finding, Findings, LogEntry, Logs
from tests.projections.envelopes import Journal, envelope, fold, refolded_snapshot, ts_at


def entries(model: Any) -> list[Any]:
    return model.page(0, 1 << 30)[1]


def logs_of(*messages: str) -> tuple[Logs, Journal]:
    j = Journal()
    for i, message in enumerate(messages):
        j.add("alice" if i % 2 == 0 else "bob", "log", {"level": "warn", "message": message})
    return fold(Logs(), j.envelopes), j


def test_a_log_event_is_an_entry_numbered_in_global_order() -> None:
    j = Journal()
    j.add("alice", "log", {"level": "error", "message": "disk full"})
    j.add("bob", "log", {})  # defaults: info, empty message
    j.add("bob", "log", {"message": "in a run", "trace_id": "ab" * 16})
    logs = fold(Logs(), j.envelopes)
    assert entries(logs) == [
        LogEntry(1, ts_at(1), "error", "alice", "disk full"),
        LogEntry(2, ts_at(2), "info", "bob", ""),
        LogEntry(3, ts_at(3), "info", "bob", "in a run", "ab" * 16),
    ]
    assert logs.last_seq == 3


def test_non_string_fields_are_kept_as_text() -> None:
    logs = fold(Logs(), [envelope("a", 1, "log", {"level": 3, "message": None}, position=1)])
    (entry,) = entries(logs)
    assert (entry.level, entry.message) == ("3", "None")


def test_logs_ignore_every_other_type_and_findings_theirs() -> None:
    j = Journal()
    j.add("alice", "finding", {"title": "t"})
    j.add("alice", "task.created", {"id": "t1"})
    j.add("alice", "log", {"message": "m"})
    logs, findings = Logs(), Findings()
    disk = DiskModels([logs, findings]).scratch()
    with disk.space_env().begin(write=True) as txn:
        for one in j.envelopes:  # directly, past the registry's `handles` filter
            logs.fold(txn, one)
            findings.fold(txn, one)
    assert [e.message for e in entries(logs)] == ["m"]
    assert [e.title for e in entries(findings)] == ["t"]
    assert (logs.handles, findings.handles) == (frozenset({"log"}), frozenset({"finding"}))


def test_a_page_is_the_entries_after_since_with_the_next_seq_to_poll_with() -> None:
    logs, _ = logs_of("a", "b", "c", "d", "e")
    next_seq, items = logs.page(0, 2)
    assert (next_seq, [e.message for e in items]) == (2, ["a", "b"])
    next_seq, items = logs.page(next_seq, 2)
    assert (next_seq, [e.message for e in items]) == (4, ["c", "d"])
    next_seq, items = logs.page(next_seq, 2)
    assert (next_seq, [e.message for e in items]) == (5, ["e"])
    assert logs.page(next_seq, 2) == (5, [])  # caught up: poll again with the same seq
    assert logs.page(0, 100)[0] == 5


@pytest.mark.parametrize(
    ("since", "limit", "expected"),
    [
        (10, 5, (10, [])),  # past the end: since comes back unchanged
        (-3, 5, (0, [])),  # negative: nothing, and 0 to start from
        (1, 0, (1, [])),  # a zero limit returns nothing
        (2, 1, (3, [3])),
    ],
)
def test_page_edges(since: int, limit: int, expected: tuple[int, list[int]]) -> None:
    logs, _ = logs_of("a", "b", "c")
    next_seq, items = logs.page(since, limit)
    assert (next_seq, [e.seq for e in items]) == expected


def test_seq_at_finds_the_entry_folded_from_a_position() -> None:
    j = Journal()
    j.add("alice", "log", {"message": "one"})  # position 1 → seq 1
    j.add("alice", "finding", {})  # position 2: not a log
    j.add("bob", "log", {"message": "two"})  # position 3 → seq 2
    logs = fold(Logs(), j.envelopes)
    assert [logs.seq_at(p) for p in (0, 1, 2, 3, 4)] == [None, 1, None, 2, None]
    assert fold(Logs(), []).seq_at(1) is None


def test_a_finding_is_an_entry_with_severity_title_and_detail() -> None:
    j = Journal()
    j.add("alice", "finding", {"severity": "high", "title": "leak", "detail": "a key"})
    j.add("bob", "finding", {})
    j.add("bob", "finding", {"title": "in a run", "trace_id": "cd" * 16})
    findings = fold(Findings(), j.envelopes)
    assert entries(findings) == [
        Finding(1, ts_at(1), "alice", "high", "leak", "a key"),
        Finding(2, ts_at(2), "bob", "info", "", ""),
        Finding(3, ts_at(3), "bob", "info", "in a run", "", trace_id="cd" * 16),
    ]
    assert findings.page(1, 1) == (2, [entries(findings)[1]])
    assert findings.seq_at(2) == 2
    assert findings.snapshot()["incidents"] == []


def test_findings_keep_the_incident_keys_of_their_own_journal() -> None:
    """A key counts only in the journal it names (`<node>/...` in journal `<node>`): a finding
    a peer writes in its own journal cannot pre-suppress this node's alert."""
    j = Journal()
    j.add("node-a", "finding", {"title": "fork", "incident": "node-a/fork:alice:3"})
    j.add("node-a", "finding", {"title": "again", "incident": "node-a/fork:alice:3"})
    j.add("node-a", "finding", {"title": "other", "incident": "node-a/bad-sig:bob:1"})
    j.add("node-b", "finding", {"title": "forged", "incident": "node-a/fork:carol:1"})
    findings = fold(Findings(), j.envelopes)
    assert set(findings.snapshot()["incidents"]) == {"node-a/fork:alice:3", "node-a/bad-sig:bob:1"}
    assert findings.has_incident("node-a/fork:alice:3")
    assert not findings.has_incident("node-a/fork:carol:1")
    assert findings.last_seq == 4  # the entries are all there; the set only remembers keys


@pytest.mark.parametrize("kind", [Logs, Findings])
def test_snapshot_and_refold(kind: type[Any]) -> None:
    j = Journal()
    for i in range(5):
        j.add(f"agent{i % 2}", "log", {"message": str(i)})
        j.add(f"agent{i % 2}", "finding", {"title": str(i), "incident": f"k{i % 3}"})
    model = fold(kind(), j.envelopes)
    assert model.last_seq == 5
    assert refolded_snapshot(model, j.envelopes) == model.snapshot()


def test_snapshots_list_the_entries_and_for_findings_the_sorted_incidents() -> None:
    j = Journal()
    j.add("a", "log", {"message": "m"})
    j.add("a", "finding", {"title": "t", "incident": "a/z"})
    j.add("a", "finding", {"title": "u", "incident": "a/b"})
    assert fold(Logs(), j.envelopes).snapshot() == [
        {"seq": 1, "ts": ts_at(1), "level": "info", "agent": "a", "message": "m", "trace_id": None}
    ]
    snapshot = fold(Findings(), j.envelopes).snapshot()
    assert snapshot["incidents"] == ["a/b", "a/z"]
    assert [e["seq"] for e in snapshot["entries"]] == [1, 2]


def test_the_finding_at_a_position() -> None:
    j = Journal()
    for i in range(600):
        j.add("ab"[i % 2], "finding", {"title": str(i)})
        j.add("ab"[i % 2], "log", {"message": str(i)})
    findings = fold(Findings(), j.envelopes)
    found = findings.at(j.envelopes[10].position)
    assert found is not None and (found.seq, found.title) == (6, "5")
    assert findings.at(j.envelopes[11].position) is None  # a log's position
    assert fold(Findings(), []).at(1) is None
