"""The `Projections` registry: which envelopes reach which projection, once, in order."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from eventstore.envelope import Envelope, decode_event, digest_of, verify_signature
from projections.base import Projections
from projections.disk import DiskModels
from projections.entries import Findings, Logs
from projections.grants import Grants
from projections.journals import Journals
from projections.ownership import Owners
from projections.packages import REGISTRY_STREAM, Registry
from projections.peers import ACKED, KEY_PINNED, PEERS_STREAM, PeerBook
from projections.tasks import Tasks
from tests.projections.envelopes import TEST_KEY, Journal, envelope


class Recorder:
    """Folds every envelope it is given as (position, type): what the registry fed it."""

    name = "recorder"

    def __init__(self) -> None:
        self.seen: list[tuple[int, str]] = []

    def apply(self, envelope: Envelope) -> None:
        self.seen.append((envelope.position, envelope.event.type))

    def snapshot(self) -> Any:
        return list(self.seen)


class LogsOnly(Recorder):
    """A projection that declares `handles`: the registry must feed it nothing else."""

    name = "logs-only"
    handles = frozenset({"log"})


class Exploding(Recorder):
    """Raises on `boom`, to see where the registry's position stops."""

    name = "exploding"

    def apply(self, envelope: Envelope) -> None:
        if envelope.event.type == "boom":
            raise RuntimeError("boom")
        super().apply(envelope)


@pytest.fixture(autouse=True)
def unfreeze() -> Iterator[None]:
    """`rebuild` freezes the GC's generations; give them back so other tests are unaffected."""
    yield
    gc.unfreeze()


def journal(*types: str) -> list[Envelope]:
    j = Journal()
    for t in types:
        j.add("alice", t, {})
    return j.envelopes


def test_helper_builds_real_signed_envelopes() -> None:
    j = Journal()
    first = j.add("alice", "log", {"message": "hi"})
    second = j.add("alice", "log", {"message": "again"})
    other = j.add("bob", "log", {})
    for made in (first, second, other):
        assert decode_event(made.payload) == made.event
        assert made.digest == digest_of(made.payload)
        assert verify_signature(
            TEST_KEY.verify_key, made.stream, made.seq, made.digest, made.signature
        )
    assert [(e.stream, e.seq, e.position) for e in j.envelopes] == [
        ("alice", 1, 1),
        ("alice", 2, 2),
        ("bob", 1, 3),
    ]
    assert (first.event.prev, second.event.prev, other.event.prev) == ("", first.payload_hash, "")
    # a signature binds stream and seq: the same payload elsewhere does not verify
    assert not verify_signature(TEST_KEY.verify_key, "bob", 1, first.digest, first.signature)


def test_apply_folds_in_order_and_moves_position_and_digest() -> None:
    envelopes = journal("a", "b", "c")
    recorder = Recorder()
    registry = Projections([recorder])
    assert (registry.position, registry.last_digest) == (0, b"")
    registry.apply(envelopes)
    assert recorder.seen == [(1, "a"), (2, "b"), (3, "c")]
    assert registry.position == 3
    assert registry.last_digest == envelopes[-1].digest


def test_a_position_is_never_folded_twice() -> None:
    envelopes = journal("a", "b", "c", "d")
    recorder = Recorder()
    registry = Projections([recorder])
    registry.apply(envelopes[:2])
    registry.apply(envelopes)  # 1 and 2 again: skipped
    registry.apply(envelopes[1:3])  # all already folded
    assert recorder.seen == [(1, "a"), (2, "b"), (3, "c"), (4, "d")]
    assert registry.position == 4


def test_an_older_position_later_in_the_same_call_is_skipped() -> None:
    first, second, third = journal("a", "b", "c")
    recorder = Recorder()
    registry = Projections([recorder])
    registry.apply([first, third, second])
    assert recorder.seen == [(1, "a"), (3, "c")]
    assert (registry.position, registry.last_digest) == (3, third.digest)


def test_an_empty_call_keeps_position_and_digest() -> None:
    envelopes = journal("a")
    registry = Projections([Recorder()])
    registry.apply(envelopes)
    registry.apply([])
    registry.apply(envelopes)  # nothing new
    assert (registry.position, registry.last_digest) == (1, envelopes[0].digest)


def test_handles_filters_what_a_projection_is_fed() -> None:
    envelopes = journal("log", "finding", "log", "task.created")
    everything, logs = Recorder(), LogsOnly()
    Projections([everything, logs]).apply(envelopes)
    assert [p for p, _ in everything.seen] == [1, 2, 3, 4]  # no `handles`: every envelope
    assert logs.seen == [(1, "log"), (3, "log")]


def test_registering_later_clears_the_per_type_cache() -> None:
    """The appliers of a type are cached; a new projection must still receive that type."""
    envelopes = journal("log", "log")
    registry = Projections([Recorder()])
    registry.apply(envelopes[:1])  # caches the appliers of "log"
    logs = LogsOnly()
    registry.register(logs)
    registry.apply(envelopes)
    assert logs.seen == [(2, "log")]  # it joins at the registry's position, not at 0


def test_a_name_registers_once() -> None:
    registry = Projections([Recorder()])
    with pytest.raises(ValueError, match="registered twice"):
        registry.register(Recorder())


def test_get_answers_the_instance_of_a_class_or_raises() -> None:
    recorder, logs = Recorder(), LogsOnly()
    registry = Projections([recorder, logs])
    assert registry.get(Recorder) is recorder
    assert registry.get(LogsOnly) is logs
    with pytest.raises(LookupError, match="no Exploding read model"):
        registry.get(Exploding)
    assert list(registry) == [recorder, logs]  # registration order


def test_fresh_gives_empty_instances_of_the_same_classes() -> None:
    recorder, logs = Recorder(), LogsOnly()
    registry = Projections([recorder, logs])
    registry.apply(journal("log", "x"))
    fresh = registry.fresh()
    assert [type(p) for p in fresh] == [Recorder, LogsOnly]
    assert fresh.get(Recorder) is not recorder
    assert fresh.position == 0
    assert fresh.snapshot() == {"recorder": [], "logs-only": []}


def test_snapshot_is_each_projections_snapshot_by_name() -> None:
    registry = Projections([Recorder(), LogsOnly()])
    registry.apply(journal("log", "x"))
    assert registry.snapshot() == {
        "recorder": [(1, "log"), (2, "x")],
        "logs-only": [(1, "log")],
    }


def test_rebuild_from_chunks_equals_live_folding() -> None:
    envelopes = journal("log", "x", "log", "y", "log")
    live = Projections([Recorder(), LogsOnly()])
    for one in envelopes:  # live commits arrive one at a time
        live.apply([one])
    rebuilt = live.fresh()
    rebuilt.rebuild([envelopes[:2], envelopes[2:4], envelopes[4:]])
    assert rebuilt.snapshot() == live.snapshot()
    assert (rebuilt.position, rebuilt.last_digest) == (live.position, live.last_digest)
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0  # the rebuilt state is frozen


def test_a_raising_fold_is_reported_and_the_rebuild_goes_on() -> None:
    """One read model raising on one envelope stops neither the others nor the rebuild."""
    faults: list[tuple[str, int, str]] = []
    recorder, exploding = Recorder(), Exploding()
    registry = Projections([exploding, recorder])
    registry.on_fault = lambda name, env, exc: faults.append((name, env.position, str(exc)))
    envelopes = journal("a", "boom", "c")
    registry.rebuild([envelopes])
    assert gc.isenabled()
    assert faults == [("exploding", 2, "boom")]
    assert exploding.seen == [(1, "a"), (3, "c")]
    assert recorder.seen == [(1, "a"), (2, "boom"), (3, "c")]
    assert (registry.position, registry.last_digest) == (3, envelopes[2].digest)


def test_envelope_positions_need_not_be_contiguous() -> None:
    """Positions are global: a projection's journal may skip some (other streams' events)."""
    recorder = Recorder()
    registry = Projections([recorder])
    registry.apply([envelope("a", 1, "x", {}, position=5), envelope("a", 2, "y", {}, position=9)])
    registry.apply([envelope("a", 3, "z", {}, position=7)])  # below 9: already past it
    assert recorder.seen == [(5, "x"), (9, "y")]
    assert registry.position == 9


def test_the_real_projections_rebuild_to_their_live_state() -> None:
    """What the node does on start, in small: every read model, live commits vs a rebuild."""
    j = Journal()
    j.add("alice", "task.created", {"id": "t1", "from": "bob", "input": {}, "a2a": {"c": 1}})
    j.add("alice", "task.started", {"id": "t1"})
    j.add("alice", "approval.requested", {"id": "a1", "capability": "http"})
    j.add("alice", "log", {"message": "asked"})
    j.add("alice", "approval.decided", {"id": "a1", "decision": "approve", "operator": "op"})
    j.add("alice", "grant.created", {"domain": "example.com"})
    j.add("alice", "task.completed", {"id": "t1", "output": {"ok": True}})
    j.add("alice", "finding", {"title": "t", "incident": "k"})
    j.add(PEERS_STREAM, KEY_PINNED, {"peer": "node-b", "public_key": "k"})
    j.add(PEERS_STREAM, ACKED, {"peer": "node-b", "heads": {"alice": 8}})
    j.add(REGISTRY_STREAM, "package.published", {"id": "p", "version": "1.0.0"})
    disk = DiskModels([Owners(), Logs(), Findings(), Tasks()]).scratch()
    live = Projections([Journals(), Registry(), Grants(), PeerBook()], disk)
    for one in j.envelopes:
        live.apply([one])
    rebuilt = live.fresh()
    rebuilt.rebuild([j.envelopes[:4], j.envelopes[4:]])
    assert rebuilt.snapshot() == live.snapshot()
    assert rebuilt.position == live.position == len(j.envelopes)
    assert live.get(Tasks).list(status="completed")[0].output == {"ok": True}
    assert live.get(Journals).head == {"alice": 8, PEERS_STREAM: 2, REGISTRY_STREAM: 1}
