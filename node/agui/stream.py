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

import itertools
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from eventstore.envelope import Envelope
from node.agui.clock import now_ms
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
_ids = itertools.count(1)


def is_agui_event(name: str) -> bool:
    return name in _EXTRA or (name.isupper() and name.startswith(_PREFIXES))


def _pick(data: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        value = data.get(key)
        if value is not None and value != "":
            return value
    return None


@dataclass
class _Thread:
    """One agent's AG-UI position: the open run, message and tool calls, or the interrupt."""

    run: str | None = None  # the open AG-UI run id
    source: str | None = None  # the runtime's run_id behind it
    started: float = 0.0
    message: str | None = None
    tools: dict[str, str] = field(default_factory=dict)  # open tool call id → tool name
    interrupted_on: str | None = None  # approval id the run is waiting for
    interrupted_run: str | None = None
    resumes: int = 0


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

    def __init__(self, approval_change: Callable[[Envelope], ApprovalChanged | None]) -> None:
        self._approval_change = approval_change
        self.states = AgentStates()
        self._threads: dict[str, _Thread] = {}

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
        agent = agent or _pick(data, "agent", "threadId")
        if not isinstance(agent, str):
            return []
        t = self._threads.setdefault(agent, _Thread())
        run_id = _pick(data, "run_id", "runId")
        run_id = str(run_id) if run_id is not None else None
        out: list[Item] = []
        if name == "RUN_STARTED":
            if t.run is not None:
                self._finish(t, agent, {}, out)
            t.interrupted_on = t.interrupted_run = None
            self._open(t, agent, run_id, data, out)
        elif name == "RUN_FINISHED":
            if t.run is not None:
                self._finish(t, agent, data, out)
            t.interrupted_on = t.interrupted_run = None
        elif name == "RUN_ERROR":
            if t.run is not None:
                self._error(t, agent, data, out)
            t.interrupted_on = t.interrupted_run = None
        elif name.startswith("TEXT_MESSAGE_"):
            self._text(t, agent, name, run_id, data, out)
        elif name.startswith("TOOL_CALL_"):
            self._tool(t, agent, name, run_id, data, out)
        else:  # STEP_*, CUSTOM, RAW, ...: passed on, tied to the open run if any
            if name.startswith("STEP_"):
                self._ensure_run(t, agent, run_id, out)
            self._emit(out, name, agent, t, data)
        return out

    def _emit(
        self,
        out: list[Item],
        name: str,
        agent: str,
        t: _Thread,
        data: dict[str, Any],
        **fields: Any,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"type": name}  # first, for whoever reads the raw stream
        body.update(data)
        body.update(type=name, agent=agent, threadId=agent)
        if t.run is not None:
            body["run_id"] = body["runId"] = t.run
        else:
            body.pop("run_id", None)
            body.pop("runId", None)
        body.update(fields)
        body.setdefault("timestamp", now_ms())
        out.append(Item(name, body, agent))
        return body

    def _open(
        self,
        t: _Thread,
        agent: str,
        run_id: str | None,
        data: dict[str, Any],
        out: list[Item],
        **fields: Any,
    ) -> None:
        t.run = run_id or f"{agent}-run-{next(_ids)}"
        t.source = run_id
        t.started = time.monotonic()
        t.message = None
        t.tools = {}
        self._emit(out, "RUN_STARTED", agent, t, data, **fields)

    def _ensure_run(self, t: _Thread, agent: str, run_id: str | None, out: list[Item]) -> None:
        if t.run is not None:
            return
        if t.interrupted_on is not None and (run_id is None or run_id == t.source):
            self._resume(t, agent, {"reason": "continued"}, out)
        else:
            self._open(t, agent, run_id, {}, out)

    def _close_open(self, t: _Thread, agent: str, out: list[Item]) -> None:
        if t.message is not None:
            self._emit(
                out, "TEXT_MESSAGE_END", agent, t, {}, message_id=t.message, messageId=t.message
            )
            t.message = None
        for tool_id, tool in list(t.tools.items()):
            self._emit(
                out,
                "TOOL_CALL_END",
                agent,
                t,
                {},
                tool=tool,
                tool_call_id=tool_id,
                toolCallId=tool_id,
            )
        t.tools = {}

    def _finish(
        self, t: _Thread, agent: str, data: dict[str, Any], out: list[Item], **fields: Any
    ) -> None:
        self._close_open(t, agent, out)
        duration = data.get("duration_ms")
        if not isinstance(duration, int):
            duration = int((time.monotonic() - t.started) * 1000)
        self._emit(out, "RUN_FINISHED", agent, t, data, duration_ms=duration, **fields)
        t.run = None

    def _error(self, t: _Thread, agent: str, data: dict[str, Any], out: list[Item]) -> None:
        message = _pick(data, "message", "error") or "agent error"
        self._emit(out, "RUN_ERROR", agent, t, data, message=str(message), error=str(message))
        t.run = None
        t.message = None
        t.tools = {}

    def _text(
        self,
        t: _Thread,
        agent: str,
        name: str,
        run_id: str | None,
        data: dict[str, Any],
        out: list[Item],
    ) -> None:
        if name == "TEXT_MESSAGE_END" and t.message is None:
            return
        self._ensure_run(t, agent, run_id, out)
        given = _pick(data, "message_id", "messageId")
        if name == "TEXT_MESSAGE_START" or (name == "TEXT_MESSAGE_CONTENT" and t.message is None):
            if t.message is not None:
                self._emit(
                    out, "TEXT_MESSAGE_END", agent, t, {}, message_id=t.message, messageId=t.message
                )
            t.message = str(given or f"{t.run}-msg-{next(_ids)}")
            role = data.get("role") if name == "TEXT_MESSAGE_START" else None
            self._emit(
                out,
                "TEXT_MESSAGE_START",
                agent,
                t,
                data if name == "TEXT_MESSAGE_START" else {},
                message_id=t.message,
                messageId=t.message,
                role=role or "assistant",
            )
            if name == "TEXT_MESSAGE_START":
                return
        if name == "TEXT_MESSAGE_CONTENT":
            text = _pick(data, "text", "delta") or ""
            self._emit(
                out,
                name,
                agent,
                t,
                data,
                message_id=t.message,
                messageId=t.message,
                text=str(text),
                delta=str(text),
            )
        elif name == "TEXT_MESSAGE_END":
            self._emit(out, name, agent, t, data, message_id=t.message, messageId=t.message)
            t.message = None
        else:  # TEXT_MESSAGE_CHUNK
            self._emit(out, name, agent, t, data)

    def _tool(
        self,
        t: _Thread,
        agent: str,
        name: str,
        run_id: str | None,
        data: dict[str, Any],
        out: list[Item],
    ) -> None:
        given = _pick(data, "tool_call_id", "toolCallId")
        tool_id: str | None
        if name == "TOOL_CALL_START":
            self._ensure_run(t, agent, run_id, out)
            tool_id = str(given or f"{t.run}-tool-{next(_ids)}")
            tool = str(_pick(data, "tool", "toolCallName", "name") or "tool")
            t.tools[tool_id] = tool
            fields: dict[str, Any] = {
                "tool": tool,
                "tool_call_id": tool_id,
                "toolCallId": tool_id,
                "toolCallName": tool,
            }
            if t.message is not None:
                fields["parentMessageId"] = t.message
            self._emit(out, name, agent, t, data, **fields)
            args = data.get("args")
            if args is not None:
                self._emit(
                    out,
                    "TOOL_CALL_ARGS",
                    agent,
                    t,
                    {},
                    tool_call_id=tool_id,
                    toolCallId=tool_id,
                    delta=json.dumps(args, default=str),
                )
            return
        tool_id = str(given) if given is not None else next(reversed(t.tools), None)
        if t.run is None or tool_id not in t.tools:
            return  # the end of a call this stream never opened
        if name == "TOOL_CALL_END":
            tool = t.tools.pop(tool_id)
            self._emit(
                out, name, agent, t, data, tool=tool, tool_call_id=tool_id, toolCallId=tool_id
            )
            result = data.get("result")
            if result is not None:
                content = result if isinstance(result, str) else json.dumps(result, default=str)
                self._emit(
                    out,
                    "TOOL_CALL_RESULT",
                    agent,
                    t,
                    {},
                    tool=tool,
                    tool_call_id=tool_id,
                    toolCallId=tool_id,
                    messageId=f"{tool_id}-result",
                    content=content,
                    role="tool",
                )
        else:  # TOOL_CALL_ARGS, TOOL_CALL_RESULT, TOOL_CALL_CHUNK
            self._emit(out, name, agent, t, data, tool_call_id=tool_id, toolCallId=tool_id)

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
            if change.requested and t.run is not None and isinstance(asked, c.ApprovalRequested):
                self._interrupt(t, agent, asked, envelope.event.ts, out)
            elif (
                change.outcome is not None and t.run is None and t.interrupted_on == change.approval
            ):
                why = {"approval_id": change.approval, "decision": change.outcome}
                self._resume(t, agent, why, out)
            return out
        if envelope.event.type not in _AGENT_ENDS:
            return out
        payload = c.payload_of(envelope)
        if isinstance(payload, c.AgentErrored):
            if t.run is not None:
                why = {"message": payload.error or "agent error", "code": payload.kind}
                self._error(t, agent, why, out)
            t.interrupted_on = t.interrupted_run = None
        elif isinstance(payload, c.AgentStopped):
            if t.run is not None:
                self._finish(t, agent, {}, out, outcome={"type": "cancelled"})
            t.interrupted_on = t.interrupted_run = None
        return out

    def _interrupt(
        self, t: _Thread, agent: str, asked: c.ApprovalRequested, ts: str, out: list[Item]
    ) -> None:
        interrupt: dict[str, Any] = {
            "id": asked.id,
            "reason": "approval",
            "message": _approval_message(asked),
            "metadata": {"capability": asked.capability, "agent": agent},
        }
        if asked.request and asked.request_hash:
            interrupt["metadata"] |= {"request": asked.request, "requestHash": asked.request_hash}
        if t.tools:
            interrupt["toolCallId"] = next(reversed(t.tools))
        expires = _expiry(ts, asked.timeout_secs)
        if expires:
            interrupt["expiresAt"] = expires
        run = t.run
        self._finish(t, agent, {}, out, outcome={"type": "interrupt", "interrupts": [interrupt]})
        t.interrupted_on = asked.id
        t.interrupted_run = run

    def _resume(self, t: _Thread, agent: str, why: dict[str, Any], out: list[Item]) -> None:
        t.resumes += 1
        base = t.source or t.interrupted_run or agent
        source = t.source
        self._open(
            t, agent, f"{base}-resume-{t.resumes}", {}, out, resumed_from=t.interrupted_run, **why
        )
        t.source = source  # the runtime keeps its own run_id for the rest of the tick
        t.interrupted_on = t.interrupted_run = None


def _approval_message(asked: c.ApprovalRequested) -> str:
    """What the operator is asked: the full request the agent will perform."""
    if asked.request:
        return f"approve {asked.capability}: {asked.request}"
    return asked.detail or f"approve {asked.capability}"


def _expiry(ts: str, timeout_secs: Any) -> str | None:
    if not isinstance(timeout_secs, int | float):
        return None
    try:
        start = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return None
    at = start.astimezone(UTC) + timedelta(seconds=timeout_secs)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
