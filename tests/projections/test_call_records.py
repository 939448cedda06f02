"""The fold of recorded host calls (projections/call_records.py) over any order of the events a
journal may hold (a replicated journal is a stranger's word): it never fails, keeps its two
indexes the same, holds no closed run, keeps a run's records up to the last one written, and
counts as approved only what an approval naming that call approved."""

from __future__ import annotations

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from projections import catalogue as c
from projections.call_records import CallRecords, OpenRuns, call_ref
from projections.disk import DiskModels
from tests.projections.envelopes import Journal

RUNS = ["r1", "r2", "r3"]
HASHES = ["sha256:" + d * 64 for d in "ab"]

run_ids = st.sampled_from(RUNS)
positions = st.integers(0, 4)
opened = st.builds(
    c.RunOpened,
    run=run_ids,
    kind=st.sampled_from(["tick", "task", "tool"]),
    subject=st.sampled_from(["", "t1", "t2"]),
)
recorded = st.builds(
    c.CallRecorded,
    run=run_ids,
    position=positions,
    call=st.sampled_from(["invoke", "infer", "create_task"]),
    request_hash=st.sampled_from(HASHES),
)
closed = st.builds(c.RunClosed, run=run_ids)
approval_ids = st.sampled_from(["a1", "a2"])
requested = st.builds(
    c.ApprovalRequested,
    id=approval_ids,
    request_hash=st.sampled_from(HASHES),
    call=st.one_of(
        st.none(),
        st.builds(call_ref, run_ids, positions),
        st.sampled_from(["r1#x", "#", "r1#-1", "nohash"]),
    ),
)
decided = st.builds(
    c.ApprovalDecided,
    id=approval_ids,
    decision=st.sampled_from(["approve", "deny"]),
    later=st.sampled_from([None, True]),
)
ended = st.one_of(
    st.builds(c.TaskCompleted, id=st.sampled_from(["t1", "t2"])),
    st.builds(c.TaskCanceled, id=st.sampled_from(["t1", "t2"])),
    st.builds(c.TaskAwaiting, id=st.sampled_from(["t1", "t2"])),
    st.builds(c.AgentRetired),
    st.builds(c.ApprovalAbandoned, id=approval_ids),
)
events = st.lists(st.one_of(opened, recorded, closed, requested, decided, ended), max_size=40)


@settings(max_examples=300, deadline=None)
@given(events)
def test_the_fold_holds_its_invariants_over_any_journal(payloads):
    fold = CallRecords()
    last_position: dict[str, int] = {}
    approvals: dict[str, tuple[str, int, str]] = {}
    approved_by_journal: set[tuple[str, int, str]] = set()
    for payload in payloads:
        fold.apply(payload)
        if isinstance(payload, c.RunOpened):
            last_position.pop(payload.run, None)
            approved_by_journal = {a for a in approved_by_journal if a[0] != payload.run}
        if isinstance(payload, c.CallRecorded) and payload.run in fold.by_run:
            last_position[payload.run] = payload.position
        if isinstance(payload, c.ApprovalRequested) and payload.call:
            run, _, pos = payload.call.rpartition("#")
            if pos.isdigit():
                approvals[payload.id] = (run, int(pos), payload.request_hash)
        approves = isinstance(payload, c.ApprovalDecided) and payload.decision == "approve"
        if approves and payload.id in approvals and not payload.later:
            approved_by_journal.add(approvals[payload.id])
        if isinstance(payload, c.RunClosed):
            assert payload.run not in fold.by_run
        # the two indexes are one set of runs
        assert {id(r) for r in fold.open.values()} == {id(r) for r in fold.by_run.values()}
        for key, run in fold.open.items():
            assert run.key == key and fold.by_run[run.run] is run
            if run.records:
                assert max(run.records) == last_position[run.run]
            for position, request_hash in run.approved.items():
                assert (run.run, position, request_hash) in approved_by_journal


def test_a_record_written_again_at_a_position_drops_the_later_ones():
    fold = CallRecords()
    fold.apply(c.RunOpened(run="r", kind="task", subject="t"))
    for position in range(3):
        fold.apply(c.CallRecorded(run="r", position=position, call="invoke"))
    fold.apply(c.CallRecorded(run="r", position=1, call="infer"))  # a diverged replay
    run = fold.resumable("task", "t")
    assert run is not None and sorted(run.records) == [0, 1]
    assert run.records[1].call == "infer"
    fold.apply(c.TaskCompleted(id="t"))
    assert fold.resumable("task", "t") is None


def _shown(run):
    if run is None:
        return None
    records = {p: msgspec.to_builtins(r) for p, r in run.records.items()}
    return (run.run, run.kind, run.subject, records, run.approved)


@settings(max_examples=80, deadline=None)
@given(events, events)
def test_the_read_model_on_disk_agrees_with_the_fold_for_every_agent(mine, theirs):
    """The node's `OpenRuns` (LMDB, folded by the journal's writer) answers what the pure fold
    of each agent's journal answers, two agents' journals interleaved."""
    disk = DiskModels([OpenRuns()]).scratch()
    journal, folds = Journal(), {"a": CallRecords(), "b": CallRecords()}
    for index in range(max(len(mine), len(theirs))):
        for agent, payloads in (("a", mine), ("b", theirs)):
            if index < len(payloads):
                journal.add(agent, *c.event_of(payloads[index]))
                folds[agent].apply(payloads[index])
    disk.fold_own(journal.envelopes)
    runs = disk.get(OpenRuns)
    assert runs is not None
    for agent, fold in folds.items():
        for kind in ("tick", "task", "tool"):
            for subject in ("", "t1", "t2"):
                want = _shown(fold.resumable(kind, subject))
                assert _shown(runs.resumable(agent, kind, subject)) == want
    disk.close()
