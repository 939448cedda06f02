"""The on-disk read models' machinery: folded once, a raising model isolated, code changes
refolded, and a digest per database for `replay` to compare."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lmdb

from eventstore.envelope import Envelope
from projections.disk import DiskModels, Space, Txn, u64
from projections.entries import Findings, Logs
from tests.projections.envelopes import Journal


class Picky:
    """Counts the logs it folds, and raises on the message "boom"."""

    name = "picky"
    handles = frozenset({"log"})

    def bind(self, space: Space) -> None:
        self.space = space
        self._seen = space.db(self.name, "seen")

    def fold(self, txn: Txn, envelope: Envelope) -> None:
        txn.put(u64(envelope.position), b"half", db=self._seen)  # undone if the next raises
        if envelope.event.data.get("message") == "boom":
            raise ValueError("boom")

    def snapshot(self) -> Any:
        with self.space.read() as txn:
            return [int.from_bytes(k, "big") for k, _ in txn.cursor(self._seen)]


def attached(models: DiskModels, directory: Path) -> DiskModels:
    """Attached as the journal attaches its own (not a rebuild's scratch copy)."""
    env = lmdb.open(str(directory), map_size=1 << 30, max_dbs=64)

    @contextmanager
    def read() -> Iterator[Txn]:
        with env.begin(buffers=False) as txn:
            yield txn

    models.attach(env, read)
    with env.begin(write=True) as txn:
        models.prepare(txn)
    return models


def fold_committed(models: DiskModels, envelopes: list[Envelope]) -> None:
    with models.space_env().begin(write=True) as txn:
        models.fold(txn, envelopes)
    models.committed()


def journal_of(*messages: str) -> Journal:
    j = Journal()
    for message in messages:
        j.add("a", "log", {"message": message})
    return j


def test_a_model_that_raises_skips_that_envelope_only_and_is_reported_after_commit() -> None:
    logs, picky = Logs(), Picky()
    disk = DiskModels([logs, picky]).scratch()
    faults: list[tuple[str, int, str]] = []
    disk.on_fault = lambda name, envelope, exc: faults.append((name, envelope.position, str(exc)))
    j = journal_of("one", "boom", "three")
    with disk.space_env().begin(write=True) as txn:
        disk.fold(txn, j.envelopes)
        assert faults == []  # not before the transaction commits
    disk.committed()
    assert faults == [("picky", 2, "boom")]
    assert picky.snapshot() == [1, 3]  # its half-written row for position 2 was undone
    assert [e.message for e in logs.page(0, 10)[1]] == ["one", "boom", "three"]
    with disk.read() as txn:
        assert disk.position(txn) == 3


def test_folding_what_was_folded_changes_nothing() -> None:
    disk = DiskModels([Logs(), Findings()]).scratch()
    j = journal_of("a", "b", "c")
    j.add("b", "finding", {"title": "t", "incident": "b/x"})
    disk.fold_own(j.envelopes[:2])
    disk.fold_own(j.envelopes)
    disk.fold_own(j.envelopes[1:])
    once = DiskModels([Logs(), Findings()]).scratch()
    once.fold_own(j.envelopes)
    assert disk.snapshot() == once.snapshot()
    assert disk.summary() == once.summary()
    assert disk.summary()["logs.entries"][0] == 3


def test_changed_code_empties_the_models_for_a_refold_from_zero() -> None:
    disk = DiskModels([Logs()]).scratch()
    disk.fold_own(journal_of("a", "b").envelopes)
    env = disk.space_env()
    with env.begin(write=True) as txn:
        disk.prepare(txn)  # same code: kept
        assert disk.position(txn) == 2
        txn.put(b"fingerprint", b"older code", db=env.open_db(b"rm.meta", txn=txn))
        disk.prepare(txn)
        assert disk.position(txn) == 0
    assert disk.get(Logs) is not None and disk.get(Logs).last_seq == 0  # type: ignore[union-attr]
    disk.fold_own(journal_of("a", "b").envelopes)
    assert disk.get(Logs).last_seq == 2  # type: ignore[union-attr]


def test_summaries_differ_when_content_does() -> None:
    one, other = DiskModels([Logs()]).scratch(), DiskModels([Logs()]).scratch()
    one.fold_own(journal_of("a", "b").envelopes)
    other.fold_own(journal_of("a", "c").envelopes)
    assert one.summary()["logs.entries"][0] == other.summary()["logs.entries"][0] == 2
    assert one.summary() != other.summary()
    one.close()
    other.close()


def test_ids_and_incident_keys_longer_than_an_lmdb_key_still_count() -> None:
    """LMDB keys end at 511 bytes; a 128-character id of 4-byte characters is 512."""
    from projections.ownership import Owners

    long_id = "\U0001f600" * 128
    incident = "a/" + "x" * 600
    owners, findings = Owners(), Findings()
    disk = DiskModels([owners, findings]).scratch()
    j = Journal()
    j.add("a", "task.created", {"id": long_id, "from": "b", "input": {}})
    j.add("a", "finding", {"title": "t", "incident": incident})
    faults: list[object] = []
    disk.on_fault = lambda *fault: faults.append(fault)
    disk.fold_own(j.envelopes)
    assert faults == []
    assert owners.owner_of("task", long_id) == "a"
    assert not owners.allows(j.add("b", "task.completed", {"id": long_id}))
    assert findings.has_incident(incident) and not findings.has_incident(incident + "y")


def test_seq_at_answers_from_committed_folds_only(tmp_path: Path) -> None:
    """The newest seqs are kept in memory for the POST that asks right after its commit; a
    fold whose transaction was undone (the writer retries it) must leave nothing there."""
    logs = Logs()
    disk = attached(DiskModels([logs]), tmp_path / "journal")
    undone = journal_of("x", "y")
    with disk.space_env().begin(write=True) as txn:
        disk.fold(txn, undone.envelopes)
        txn.abort()
    assert logs.seq_at(1) is None  # not committed: neither on disk nor in memory

    j = Journal()
    j.add("a", "finding", {"title": "not a log"})  # position 1: no log entry
    j.add("a", "log", {"message": "one"})  # position 2: log seq 1
    fold_committed(disk, j.envelopes)
    assert logs.seq_at(1) is None
    assert logs.seq_at(2) == 1
    assert logs._recent == {2: 1}  # served without a read; the undone fold left nothing

    later = attached(DiskModels([Logs()]), tmp_path / "later")  # a fresh process: read LMDB
    fold_committed(later, j.envelopes)
    fresh = later.get(Logs)
    assert fresh is not None
    fresh._recent.clear()
    fresh._older.clear()
    assert fresh.seq_at(2) == 1 and fresh.seq_at(1) is None
    assert fresh._recent == {}


def test_a_scratch_copy_keeps_no_cache_of_its_newest_entries() -> None:
    """Nothing posts to a rebuild's copy: its seqs are read from LMDB, and nothing piles up."""
    logs = Logs()
    disk = DiskModels([logs]).scratch()
    disk.fold_own(journal_of("one", "two").envelopes)
    assert logs._recent == {} and logs._staged == []
    assert logs.seq_at(2) == 2 and logs.seq_at(3) is None
