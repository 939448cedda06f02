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

from projections import catalogue as c
from projections.catalogue import CallRecorded, RunClosed, RunOpened

RunKey = tuple[str, str]  # (kind, subject): what a new run is matched to
_TASK_ENDS = frozenset({c.TASK_COMPLETED, c.TASK_FAILED, c.TASK_CANCELED})


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
