"""A rebuild folds the on-disk read models of its scratch copy in write transactions that span
many chunks (`DiskModels.bulk`): the rows must be byte for byte those the journal's writer
folds live, a raising model must be isolated as in a fold chunk by chunk, and a chunk source
that fails must leave exactly the chunks before it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest

import projections.disk as disk_module
from eventstore.envelope import Envelope
from eventstore.store import NewEvent
from node.context import CONTEXT
from projections.base import Projections
from projections.disk import DiskModels
from projections.entries import Findings, Logs
from projections.journals import Journals
from projections.tasks import Tasks
from tests.projections.envelopes import Journal
from tests.projections.test_disk import Picky


@pytest.fixture
def small_bulk(monkeypatch: pytest.MonkeyPatch) -> int:
    """Bulk transactions of a few envelopes, so that a small journal spans several."""
    monkeypatch.setattr(disk_module, "_BULK_ENVELOPES", 5)
    return 5


def history() -> list[NewEvent]:
    """Every kind of row the on-disk models keep, from several journals, interleaved."""
    events: list[NewEvent] = []
    for i in range(12):
        agent = f"a{i % 3}"
        task = f"t{i}"
        events += [
            NewEvent(agent, "task.created", {"id": task, "from": "b", "input": {"n": i}}),
            NewEvent(agent, "log", {"level": "warn", "message": f"m{i}"}),
            NewEvent(agent, "task.started", {"id": task}),
            NewEvent(agent, "finding", {"severity": "low", "title": str(i), "detail": "d"}),
            NewEvent(agent, "task.completed", {"id": task, "output": {"ok": i}}),
        ]
        if i % 4 == 0:  # a sync incident in its own journal, and one naming another journal
            events.append(NewEvent(agent, "finding", {"title": "i", "incident": f"{agent}/x{i}"}))
            events.append(NewEvent(agent, "finding", {"title": "j", "incident": f"zz/x{i}"}))
        events.append(NewEvent(f"a{(i + 1) % 3}", "task.completed", {"id": task, "output": {}}))
    return events


async def test_a_bulk_rebuild_writes_the_rows_the_journals_writer_wrote(client, small_bulk):
    """Live: the writer folds the node's models in its own transactions, on real LMDB. A
    rebuild from position 0 in chunks of 3, committed every 5 envelopes: every database of
    every model holds the same bytes (what `agent-node replay` compares)."""
    ctx = client.app[CONTEXT]
    events = history()
    for start in range(0, len(events), 7):  # several commits of the writer
        await ctx.store.append_many(events[start : start + 7])
    rebuilt = ctx.projections.fresh()
    rebuilt.rebuild(ctx.store.iter_chunks(0, size=3))
    live_disk, rebuilt_disk = ctx.projections.disk, rebuilt.disk
    assert live_disk is not None and rebuilt_disk is not None
    assert rebuilt.position == ctx.store.last_position
    summary = rebuilt_disk.summary()
    assert summary == live_disk.summary()
    assert summary["findings.entries"][0] == 12 + 6 and summary["findings.incidents"][0] == 3
    assert summary["logs.entries"][0] == 12
    assert rebuilt.snapshot() == ctx.projections.snapshot()
    with rebuilt_disk.read() as txn:
        assert rebuilt_disk.position(txn) == ctx.store.last_position
    assert len(rebuilt.get(Tasks).list(status="completed")) == 12


def messages(*texts: str) -> list[Envelope]:
    j = Journal()
    for text in texts:
        j.add("a", "log", {"message": text})
        j.add("a", "finding", {"title": text})
    return j.envelopes


def chunked(envelopes: list[Envelope], size: int) -> list[list[Envelope]]:
    return [envelopes[i : i + size] for i in range(0, len(envelopes), size)]


def registry(faults: list[tuple[str, int]]) -> Projections:
    disk = DiskModels([Logs(), Picky(), Findings()]).scratch()
    models = Projections([Journals()], disk)
    disk.on_fault = lambda name, envelope, exc: faults.append((name, envelope.position))
    return models


def test_a_model_raising_in_a_bulk_rebuild_is_isolated_as_chunk_by_chunk(small_bulk):
    envelopes = messages("one", "boom", "three", "four", "boom", "six", "seven")
    by_chunk_faults: list[tuple[str, int]] = []
    by_chunk = registry(by_chunk_faults)
    for chunk in chunked(envelopes, 3):
        by_chunk.apply(chunk)  # one write transaction per chunk, as before the bulk folds
    bulk_faults: list[tuple[str, int]] = []
    bulk = registry(bulk_faults)
    bulk.rebuild(chunked(envelopes, 3))
    assert bulk_faults == by_chunk_faults == [("picky", 3), ("picky", 9)]
    assert bulk.snapshot() == by_chunk.snapshot()
    assert bulk.snapshot()["picky"] == [1, 5, 7, 11, 13]  # the raising folds left no row
    assert bulk.get(Logs).last_seq == 7 and bulk.get(Findings).last_seq == 7
    assert bulk.disk is not None and by_chunk.disk is not None
    assert bulk.disk.summary() == by_chunk.disk.summary()


def test_a_chunk_source_that_fails_leaves_the_chunks_before_it(small_bulk):
    envelopes = messages("one", "two", "three", "four")

    def failing() -> Iterator[Sequence[Envelope]]:
        yield envelopes[:3]
        yield envelopes[3:6]  # six envelopes: one commit inside, the rest at the failure
        raise OSError("the journal could not be read")

    models = registry([])
    with pytest.raises(OSError):
        models.rebuild(failing())
    assert models.disk is not None
    with models.disk.read() as txn:
        assert models.disk.position(txn) == 6
    assert [e.message for e in models.get(Logs).page(0, 10)[1]] == ["one", "two", "three"]
    assert models.position == 6
    models.rebuild([envelopes[4:]])  # a fold that goes on from there skips what it has
    assert models.get(Logs).last_seq == 4 and models.get(Findings).last_seq == 4


class Batcher:
    """Folds batches with `apply_many`, and raises on "boom" both ways."""

    name = "batcher"

    def __init__(self) -> None:
        self.seen: list[int] = []

    def apply(self, envelope: Envelope) -> None:
        if envelope.event.data.get("message") == "boom":
            raise RuntimeError("boom")
        if envelope.position not in self.seen:  # repeatable, as `apply_many` requires
            self.seen.append(envelope.position)

    def apply_many(self, envelopes: list[Envelope]) -> None:
        for envelope in envelopes:
            self.apply(envelope)

    def snapshot(self) -> Any:
        return list(self.seen)


def test_a_batch_fold_that_raises_is_folded_again_one_by_one():
    envelopes = [e for e in messages("one", "boom", "three") if e.event.type == "log"]
    faults: list[tuple[str, int]] = []
    models = Projections([Batcher(), Journals()])
    models.on_fault = lambda name, envelope, exc: faults.append((name, envelope.position))
    models.rebuild([envelopes])
    assert faults == [("batcher", 3)]
    assert models.snapshot()["batcher"] == [1, 5]
    assert models.get(Journals).head == {"a": 5}
    assert models.position == 5


def test_journals_fold_a_batch_as_they_fold_each():
    j = Journal()
    for stream, origin in (("a", "n1"), ("b", "n2"), ("a", "n3"), ("c", "n1"), ("b", "n1")):
        j.origin = origin
        j.add(stream, "log", {"message": "x"})
    each, batch = Journals(), Journals()
    for envelope in j.envelopes:
        each.apply(envelope)
    batch.apply_many(j.envelopes[:2])
    batch.apply_many(j.envelopes[2:])
    assert batch.snapshot() == each.snapshot()
    assert batch.home == {"a": "n1", "b": "n2", "c": "n1"}
