"""The AG-UI stream: the runtime's run events made into a well-nested AG-UI sequence per agent.

Why a translator and not a pass-through: an AG-UI client rejects a run that finishes with a
text message or tool call still open, content for a message that never started, and events of
a run it never saw start. So, per agent (AG-UI thread, `threadId` = agent):
  - RUN_FINISHED closes any open message and tool call first; a new RUN_STARTED closes the
    previous run; content without a start gets its TEXT_MESSAGE_START; events of no open run
    open one, and ends of no open run are dropped.
  - An approval gate (`approval.requested` journaled while a run is open) finishes the run with
    AG-UI 1.0's interrupt outcome; the decision (`approval.decided` / `approval.timed_out`)
    starts the resumed run, to which the runtime's later events for its run are mapped.
  - `agent.errored` ends an open run with RUN_ERROR; `agent.stopped` cancels one.
Every event's data carries `type`, the spec's snake_case fields and AG-UI's camelCase ones.
Agent state is `{agents: [{name, status}]}`: STATE_SNAPSHOT on connect, then STATE_DELTA as an
RFC 6902 patch against it. `AguiView` keeps each client from seeing a run it did not see start.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from eventstore.envelope import Envelope
from node.agui.clock import now_ms
from node.agui.thread import AguiThread, pick
from node.streams.frames import Item
from projections import catalogue as c
from projections.states import ApprovalChanged

_AGENT_ENDS = frozenset({c.AGENT_ERRORED, c.AGENT_STOPPED})

STATUS_EVENT = "agent_status"  # the runtime's status change: a STATE_DELTA here
_EXTRA = frozenset({"RAW", "CUSTOM"})
_PREFIXES = (
    "RUN_",
    "STEP_",
    "TEXT_MESSAGE_",
    "TOOL_CALL_",
    "STATE_",
    "MESSAGES_",
    "ACTIVITY_",
    "REASONING_",
)
_RUN_END = ("RUN_FINISHED", "RUN_ERROR")


def is_agui_event(name: str) -> bool:
    return name in _EXTRA or (name.isupper() and name.startswith(_PREFIXES))


class AgentStates:
    """The AG-UI state document `{agents: [{name, status}]}`; set() answers its JSON Patch."""

    def __init__(self) -> None:
        self._agents: list[dict[str, str]] = []
        self._index: dict[str, int] = {}

    def get(self, name: str) -> str | None:
        i = self._index.get(name)
        return None if i is None else self._agents[i]["status"]

    def set(self, name: str, status: str) -> list[dict[str, Any]]:
        i = self._index.get(name)
        if i is None:
            self._index[name] = len(self._agents)
            self._agents.append({"name": name, "status": status})
            return [{"op": "add", "path": "/agents/-", "value": {"name": name, "status": status}}]
        if self._agents[i]["status"] == status:
            return []
        self._agents[i]["status"] = status
        return [{"op": "replace", "path": f"/agents/{i}/status", "value": status}]

    def snapshot(self) -> list[dict[str, str]]:
        return [dict(agent) for agent in self._agents]


class AguiView:
    """Per-client filter: run-scoped events reach a client only for runs it saw start."""

    __slots__ = ("runs",)

    def __init__(self) -> None:
        self.runs: set[str] = set()

    def accept(self, item: Item) -> bool:
        run = item.data.get("runId")
        if run is None:
            return True
        if item.name == "RUN_STARTED":
            self.runs.add(run)
            return True
        if run not in self.runs:
            return False
        if item.name in _RUN_END:
            self.runs.discard(run)
        return True


class AguiTranslator:
    """`approval_change` is the tasks read model's (`Tasks.approval_change`): an interrupt
    opens and resumes on what the one state machine decided, not on raw events."""

    def __init__(
        self,
        approval_change: Callable[[Envelope], ApprovalChanged | None],
        decided_at_once: Callable[[str], bool] = lambda approval_id: False,
    ) -> None:
        self._approval_change = approval_change
        # a request the policy set decided in its own write never waited: no interrupt
        self._decided_at_once = decided_at_once
        self.states = AgentStates()
        self._threads: dict[str, AguiThread] = {}

    # ----------------------------------------------------------------- state
    def on_status(self, agent: str | None, status: Any) -> list[Item]:
        if not agent or not isinstance(status, str):
            return []
        patch = self.states.set(agent, status)
        if not patch:
            return []
        data = {
            "type": "STATE_DELTA",
            "agent": agent,
            "status": status,
            "delta": patch,
            "timestamp": now_ms(),
        }
        return [Item("STATE_DELTA", data)]

    def sync(self, current: Iterable[tuple[str, str]]) -> list[Item]:
        """Fold statuses read from the runtime; deltas for what changed unseen."""
        out: list[Item] = []
        for name, status in current:
            out += self.on_status(name, status)
        return out

    def snapshot_item(self) -> Item:
        agents = self.states.snapshot()
        data = {
            "type": "STATE_SNAPSHOT",
            "agents": agents,
            "snapshot": {"agents": agents},
            "timestamp": now_ms(),
        }
        return Item("STATE_SNAPSHOT", data)

    # ----------------------------------------------------------------- runtime events
    stateful = True  # folds every event, listened to or not: a new client gets the snapshot

    def on_runtime(self, name: str, data: dict[str, Any], agent: str | None) -> list[Item]:
        """The bus's adapter call: status changes become STATE_DELTAs, AG-UI events pass
        through the run framing, anything else is not AG-UI's."""
        if name == STATUS_EVENT:
            return self.on_status(agent, data.get("status"))
        if not is_agui_event(name):
            return []
        return self._on_run_event(name, data, agent)

    def _on_run_event(self, name: str, data: dict[str, Any], agent: str | None) -> list[Item]:
        agent = agent or pick(data, "agent", "threadId")
        if not isinstance(agent, str):
            return []
        t = self._threads.get(agent) or self._threads.setdefault(agent, AguiThread(agent))
        run_id = pick(data, "run_id", "runId")
        run_id = str(run_id) if run_id is not None else None
        out: list[Item] = []
        if name == "RUN_STARTED":
            if t.run is not None:
                t.finish({}, out)
            t.not_interrupted()
            t.open(run_id, data, out)
        elif name == "RUN_FINISHED":
            if t.run is not None:
                t.finish(data, out)
            t.not_interrupted()
        elif name == "RUN_ERROR":
            if t.run is not None:
                t.error(data, out)
            t.not_interrupted()
        elif name.startswith("TEXT_MESSAGE_"):
            t.text(name, run_id, data, out)
        elif name.startswith("TOOL_CALL_"):
            t.tool(name, run_id, data, out)
        else:  # STEP_*, CUSTOM, RAW, ...: passed on, tied to the open run if any
            if name.startswith("STEP_"):
                t.ensure_run(run_id, out)
            t.emit(out, name, data)
        return out

    # ----------------------------------------------------------------- journaled events
    def on_journal(self, envelope: Envelope) -> list[Item]:
        agent = envelope.stream
        t = self._threads.get(agent)
        if t is None:
            return []
        out: list[Item] = []
        change = self._approval_change(envelope)
        if change is not None:
            asked = c.payload_of(envelope)
            waits = change.requested and not self._decided_at_once(change.approval)
            if waits and t.run is not None and isinstance(asked, c.ApprovalRequested):
                t.interrupt(asked, envelope.event.ts, out)
            elif (
                change.outcome is not None and t.run is None and t.interrupted_on == change.approval
            ):
                why = {"approval_id": change.approval, "decision": change.outcome}
                t.resume(why, out)
            return out
        if envelope.event.type not in _AGENT_ENDS:
            return out
        payload = c.payload_of(envelope)
        if isinstance(payload, c.AgentErrored):
            if t.run is not None:
                why = {"message": payload.error or "agent error", "code": payload.kind}
                t.error(why, out)
            t.not_interrupted()
        elif isinstance(payload, c.AgentStopped):
            if t.run is not None:
                t.finish({}, out, outcome={"type": "cancelled"})
            t.not_interrupted()
        return out
