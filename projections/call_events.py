"""The events of recorded host calls (docs/agents.md, "When a node dies mid-run").

A run (a tick, a task's turn, a tool call) that makes a host call with an effect or a cost
first journals `run.opened`: its id, which the call keys (Idempotency-Key) derive from, is then
the same on every node that resumes it. Each such call, once it returned, is journaled as
`call.recorded` with its position in the run, the hash of its request and its result (redacted,
bounded), before the result reaches the agent; `run.closed` ends the run. A run interrupted
before `run.closed` is resumed by the next instance: node/runtime/callrecords.py folds these
events and returns the recorded results instead of performing the calls again.

Imported by projections.catalogue, which registers these types with the others.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from projections.catalogue import Count, Id, Name, Payload, RequestHash, entry

RUN_OPENED = "run.opened"
CALL_RECORDED = "call.recorded"
RUN_CLOSED = "run.closed"
CALL_EVENTS = frozenset({RUN_OPENED, CALL_RECORDED, RUN_CLOSED})

# what one record's result may hold at most, whatever the config says: a recorded event stays
# under the peers' push limit (node.runtime.limits.MAX_EVENT_BYTES, 256 KiB)
MAX_RECORD_RESULT = 192 * 1024
RunKindName = Literal["tick", "task", "tool", "list-tools"]
CallName = Literal["invoke", "infer", "create_task"]
Outcome = Literal["ok", "error"]


@entry
class RunOpened(Payload):
    """A run's first recorded call is about to be made. `subject` is what the next instance
    matches a run it starts to (a task's id, a tool's name, "" for a tick)."""

    type = RUN_OPENED
    run: Id
    kind: RunKindName
    subject: Name = ""


@entry
class CallRecorded(Payload):
    """A host call that returned: `call` and `target` say which (the capability, the model
    route, the receiving agent), `request_hash` what it was asked, `result` what it gave (the
    agent's text; for an error, its message with `error_kind`). A result past the record's bound
    is not kept: `omitted` holds its size, and a resumed run gets an error instead of it."""

    type = CALL_RECORDED
    run: Id
    position: Count
    call: CallName
    target: Name = ""
    request_hash: RequestHash = ""
    outcome: Outcome = "ok"
    result: Annotated[str, msgspec.Meta(max_length=MAX_RECORD_RESULT)] = ""
    error_kind: Name | None = None
    omitted: Count | None = None


@entry
class RunClosed(Payload):
    """The run returned (or faulted): a later run never takes its records."""

    type = RUN_CLOSED
    run: Id
