"""Which runs of one agent were interrupted, and what each of their host calls returned.

A pure fold of the agent's journal (`run.opened`, `call.recorded`, `run.closed`, in
projections/catalogue.py): a run is open from its `run.opened` to its `run.closed`, or until
its task ends; it holds the calls it recorded by position and the approvals given to its calls
(an `approval.requested` naming the call, then approved), so that a resumed run neither
performs a completed call again nor asks again for a call already approved. Only open runs
are kept; a later run of the same kind and subject replaces an open one (it can never be
resumed any more).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from eventstore.envelope import Envelope
from projections import catalogue as c
from projections.catalogue import CallRecorded, RunClosed, RunOpened
from projections.disk import Space, Txn, from_u64, key_of, u64

RunKey = tuple[str, str]  # (kind, subject): what a new run is matched to
# a task's run ends with its task, or when it leaves the task awaiting its client's next message:
# a task's run needs no `run.closed` of its own (node/runtime/callrecords.py writes none)
_TASK_ENDS = frozenset({c.TASK_COMPLETED, c.TASK_FAILED, c.TASK_CANCELED, c.TASK_AWAITING})


def call_ref(run: str, position: int) -> str:
    """How an approval request names the call that asked it."""
    return f"{run}#{position}"


@dataclass
class OpenRun:
    run: str
    kind: str
    subject: str
    records: dict[int, CallRecorded] = field(default_factory=dict)
    approved: dict[int, str] = field(default_factory=dict)  # position -> request hash

    @property
    def key(self) -> RunKey:
        return (self.kind, self.subject)


@dataclass
class CallRecords:
    """The open runs of one agent, folded from its journal in order."""

    open: dict[RunKey, OpenRun] = field(default_factory=dict)
    by_run: dict[str, OpenRun] = field(default_factory=dict)
    # approval id -> (run, position, request hash), for requests a recorded call asked
    asked: dict[str, tuple[str, int, str]] = field(default_factory=dict)

    def apply(self, payload: c.Payload | None) -> None:
        if isinstance(payload, RunOpened):
            self._drop(self.open.get((payload.kind, payload.subject)))
            self._drop(self.by_run.get(payload.run))  # the same id opened twice: the later
            opened = OpenRun(payload.run, payload.kind, payload.subject)
            self.open[opened.key] = self.by_run[opened.run] = opened
        elif isinstance(payload, CallRecorded):
            run = self.by_run.get(payload.run)
            if run is not None:
                # a record at a position drops those after it: they belonged to a replay that
                # diverged before them (a recording run only ever appends at its end)
                for later in [p for p in run.records if p > payload.position]:
                    del run.records[later]
                run.records[payload.position] = payload
        elif isinstance(payload, RunClosed):
            self._drop(self.by_run.get(payload.run))
        elif isinstance(payload, c.ApprovalRequested):
            self._asked(payload)
        elif isinstance(payload, c.ApprovalDecided):
            asked = self.asked.pop(payload.id, None)
            if asked is not None and payload.decision == "approve" and not payload.later:
                run_id, position, request_hash = asked
                if (run := self.by_run.get(run_id)) is not None:
                    run.approved[position] = request_hash
        elif isinstance(payload, c.ApprovalTimedOut | c.ApprovalAbandoned):
            self.asked.pop(payload.id, None)
        elif payload is not None and payload.type in _TASK_ENDS:
            task = getattr(payload, "id", None)
            self._drop(self.open.get(("task", task)) if isinstance(task, str) else None)
        elif isinstance(payload, c.AgentRetired):
            self.open.clear()
            self.by_run.clear()
            self.asked.clear()

    def _asked(self, payload: c.ApprovalRequested) -> None:
        if payload.call is None:
            return
        run_id, _, position = payload.call.rpartition("#")
        if run_id in self.by_run and position.isdigit():
            self.asked[payload.id] = (run_id, int(position), payload.request_hash)

    def _drop(self, run: OpenRun | None) -> None:
        if run is not None:
            self.open.pop(run.key, None)
            self.by_run.pop(run.run, None)

    def resumable(self, kind: str, subject: str) -> OpenRun | None:
        """The interrupted run a new run of `kind` about `subject` resumes, if any."""
        return self.open.get((kind, subject))


# ----------------------------------------------------------------------------- on disk
def _part(value: str) -> bytes:
    """One part of a composite key, length-prefixed so that no part's end is ambiguous and a
    run's keys share its prefix."""
    raw = key_of(value, 64)
    return len(raw).to_bytes(2, "big") + raw


def _run_prefix(agent: str, run: str) -> bytes:
    return _part(agent) + _part(run)


_ENCODE = msgspec.msgpack.Encoder()
_Asked = tuple[str, int, str]  # run, position, request hash
_Run = tuple[str, str]  # kind, subject


class OpenRuns:
    """`CallRecords` on disk, for every agent: the journal's writer folds it in the write of
    each record, so that an instance starting (or a node taking an agent over) reads its
    interrupted runs without folding the agent's history (docs/agents.md, "When a node dies
    mid-run"). The same transitions as `CallRecords` (tests/projections/test_call_records.py
    checks they agree over any journal); it holds only open runs: a run's records go at its
    close, its task's end or the agent's retirement."""

    name = "call_records"
    handles = frozenset(
        {
            c.RUN_OPENED,
            c.CALL_RECORDED,
            c.RUN_CLOSED,
            c.APPROVAL_REQUESTED,
            c.APPROVAL_DECIDED,
            c.APPROVAL_TIMED_OUT,
            c.APPROVAL_ABANDONED,
            c.AGENT_RETIRED,
            *_TASK_ENDS,
        }
    )
    space: Space

    def bind(self, space: Space) -> None:
        self.space = space
        self._open = space.db(self.name, "open")  # agent, kind, subject -> run
        self._runs = space.db(self.name, "runs")  # agent, run -> (kind, subject)
        self._records = space.db(self.name, "records")  # agent, run, position -> record
        self._approved = space.db(self.name, "approved")  # agent, run, position -> hash
        self._asked = space.db(self.name, "asked")  # agent, approval -> (run, position, hash)

    # ------------------------------------------------------------------ fold
    def fold(self, txn: Txn, envelope: Envelope) -> None:
        agent, payload = envelope.stream, c.payload_of(envelope)
        if isinstance(payload, RunOpened):
            self._drop(txn, agent, self._open_run(txn, agent, payload.kind, payload.subject))
            self._drop(txn, agent, payload.run)
            key = _part(agent) + _part(payload.kind) + _part(payload.subject)
            txn.put(key, payload.run.encode(), db=self._open)
            value = _ENCODE.encode((payload.kind, payload.subject))
            txn.put(_run_prefix(agent, payload.run), value, db=self._runs)
        elif isinstance(payload, CallRecorded):
            prefix = _run_prefix(agent, payload.run)
            if txn.get(prefix, db=self._runs) is None:
                return
            # as in CallRecords: a record at a position drops those after it
            self._delete_from(txn, self._records, prefix, prefix + u64(payload.position + 1))
            raw = _ENCODE.encode(c.event_of(payload)[1])
            txn.put(prefix + u64(payload.position), raw, db=self._records)
        elif isinstance(payload, RunClosed):
            self._drop(txn, agent, payload.run)
        elif isinstance(payload, c.ApprovalRequested):
            self._requested(txn, agent, payload)
        elif isinstance(payload, c.ApprovalDecided):
            asked = self._pop_asked(txn, agent, payload.id)
            if asked is not None and payload.decision == "approve" and not payload.later:
                run, position, request_hash = asked
                prefix = _run_prefix(agent, run)
                if txn.get(prefix, db=self._runs) is not None:
                    txn.put(prefix + u64(position), request_hash.encode(), db=self._approved)
        elif isinstance(payload, c.ApprovalTimedOut | c.ApprovalAbandoned):
            self._pop_asked(txn, agent, payload.id)
        elif isinstance(payload, c.AgentRetired):
            for db in (self._open, self._runs, self._records, self._approved, self._asked):
                self._delete_from(txn, db, _part(agent))
        elif payload is not None and payload.type in _TASK_ENDS:
            task = getattr(payload, "id", None)
            if isinstance(task, str):
                self._drop(txn, agent, self._open_run(txn, agent, "task", task))

    def _requested(self, txn: Txn, agent: str, payload: c.ApprovalRequested) -> None:
        if payload.call is None:
            return
        run, _, position = payload.call.rpartition("#")
        if position.isdigit() and txn.get(_run_prefix(agent, run), db=self._runs) is not None:
            value = _ENCODE.encode((run, int(position), payload.request_hash))
            txn.put(_part(agent) + _part(payload.id), value, db=self._asked)

    def _pop_asked(self, txn: Txn, agent: str, approval: str) -> _Asked | None:
        key = _part(agent) + _part(approval)
        raw = txn.pop(key, db=self._asked)
        if raw is None:
            return None
        run, position, request_hash = msgspec.msgpack.decode(raw)
        return str(run), int(position), str(request_hash)

    def _open_run(self, txn: Txn, agent: str, kind: str, subject: str) -> str | None:
        raw = txn.get(_part(agent) + _part(kind) + _part(subject), db=self._open)
        return raw.decode() if raw is not None else None

    def _drop(self, txn: Txn, agent: str, run: str | None) -> None:
        if run is None:
            return
        prefix = _run_prefix(agent, run)
        raw = txn.pop(prefix, db=self._runs)
        if raw is None:
            return
        kind, subject = msgspec.msgpack.decode(raw)
        open_key = _part(agent) + _part(kind) + _part(subject)
        if txn.get(open_key, db=self._open) == run.encode():
            txn.delete(open_key, db=self._open)
        self._delete_from(txn, self._records, prefix)
        self._delete_from(txn, self._approved, prefix)

    @staticmethod
    def _delete_from(txn: Txn, db: Any, prefix: bytes, start: bytes | None = None) -> None:
        """Delete the keys that start with `prefix`, from `start` on (default: all of them)."""
        cursor = txn.cursor(db)
        if not cursor.set_range(start or prefix):
            return
        while cursor.key().startswith(prefix):
            if not cursor.delete():
                break

    # ------------------------------------------------------------------ reads
    def resumable(self, agent: str, kind: str, subject: str) -> OpenRun | None:
        """The interrupted run a new run of `kind` about `subject` resumes, if any."""
        with self.space.read() as txn:
            run = self._open_run(txn, agent, kind, subject)
            if run is None:
                return None
            return self._read_run(txn, agent, run, kind, subject)

    def _read_run(self, txn: Txn, agent: str, run: str, kind: str, subject: str) -> OpenRun:
        found = OpenRun(run, kind, subject)
        prefix = _run_prefix(agent, run)
        for key, raw in self._scan(txn, self._records, prefix):
            record = c.read(CallRecorded, msgspec.msgpack.decode(raw))
            if record is not None:
                found.records[from_u64(key[len(prefix) :])] = record
        for key, raw in self._scan(txn, self._approved, prefix):
            found.approved[from_u64(key[len(prefix) :])] = raw.decode()
        return found

    @staticmethod
    def _scan(txn: Txn, db: Any, prefix: bytes) -> list[tuple[bytes, bytes]]:
        cursor = txn.cursor(db)
        found: list[tuple[bytes, bytes]] = []
        if cursor.set_range(prefix):
            for key, value in cursor:
                if not key.startswith(prefix):
                    break
                found.append((key, value))
        return found

    def snapshot(self) -> dict[str, Any]:
        """Per agent, its open runs as `CallRecords.snapshot` gives them."""
        out: dict[str, Any] = {}
        with self.space.read() as txn:
            for key, raw in txn.cursor(self._runs):
                agent, run = _split(key)
                kind, subject = msgspec.msgpack.decode(raw)
                opened = self._read_run(txn, agent, run, kind, subject)
                out.setdefault(agent, {})[run] = _shown(opened)
            for key, raw in txn.cursor(self._asked):
                agent, approval = _split(key)
                out.setdefault(agent, {}).setdefault("asked", {})[approval] = list(
                    msgspec.msgpack.decode(raw)
                )
        return out


def _split(key: bytes) -> tuple[str, str]:
    first = int.from_bytes(key[:2], "big")
    second = int.from_bytes(key[2 + first : 4 + first], "big")
    agent, run = key[2 : 2 + first], key[4 + first : 4 + first + second]
    return agent.decode(errors="surrogateescape"), run.decode(errors="surrogateescape")


def _shown(run: OpenRun) -> dict[str, Any]:
    return {
        "kind": run.kind,
        "subject": run.subject,
        "records": {p: msgspec.to_builtins(r) for p, r in sorted(run.records.items())},
        "approved": dict(sorted(run.approved.items())),
    }
