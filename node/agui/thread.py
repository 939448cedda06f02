"""One agent's AG-UI thread: its open run, message and tool calls, or the interrupt it waits on,
and the framing rules that keep what it emits well nested (node/agui/stream.py says why)."""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any

from node.agui.clock import now_ms
from node.agui.interrupts import interrupt_of
from node.streams.frames import Item
from projections import catalogue as c

_ids = itertools.count(1)


def pick(data: dict[str, Any], *keys: str) -> Any:
    """The first of `keys` with a value: the spec's snake_case or AG-UI's camelCase."""
    for key in keys:
        value = data.get(key)
        if value is not None and value != "":
            return value
    return None


@dataclass
class AguiThread:
    agent: str
    run: str | None = None  # the open AG-UI run id
    source: str | None = None  # the runtime's run_id behind it
    started: float = 0.0
    message: str | None = None
    tools: dict[str, str] = field(default_factory=dict)  # open tool call id → tool name
    interrupted_on: str | None = None  # approval id the run is waiting for
    interrupted_run: str | None = None
    resumes: int = 0

    # ----------------------------------------------------------------- framing
    def emit(self, out: list[Item], name: str, data: dict[str, Any], **fields: Any) -> None:
        body: dict[str, Any] = {"type": name}  # first, for whoever reads the raw stream
        body.update(data)
        body.update(type=name, agent=self.agent, threadId=self.agent)
        if self.run is not None:
            body["run_id"] = body["runId"] = self.run
        else:
            body.pop("run_id", None)
            body.pop("runId", None)
        body.update(fields)
        body.setdefault("timestamp", now_ms())
        out.append(Item(name, body, self.agent))

    def open(
        self, run_id: str | None, data: dict[str, Any], out: list[Item], **fields: Any
    ) -> None:
        self.run = run_id or f"{self.agent}-run-{next(_ids)}"
        self.source = run_id
        self.started = time.monotonic()
        self.message = None
        self.tools = {}
        self.emit(out, "RUN_STARTED", data, **fields)

    def ensure_run(self, run_id: str | None, out: list[Item]) -> None:
        if self.run is not None:
            return
        if self.interrupted_on is not None and (run_id is None or run_id == self.source):
            self.resume({"reason": "continued"}, out)
        else:
            self.open(run_id, {}, out)

    def end_message(self, out: list[Item], data: dict[str, Any] | None = None) -> None:
        self.emit(
            out, "TEXT_MESSAGE_END", data or {}, message_id=self.message, messageId=self.message
        )
        self.message = None

    def close_open(self, out: list[Item]) -> None:
        if self.message is not None:
            self.end_message(out)
        for tool_id, tool in list(self.tools.items()):
            self.emit(out, "TOOL_CALL_END", {}, tool=tool, tool_call_id=tool_id, toolCallId=tool_id)
        self.tools = {}

    def finish(self, data: dict[str, Any], out: list[Item], **fields: Any) -> None:
        self.close_open(out)
        duration = data.get("duration_ms")
        if not isinstance(duration, int):
            duration = int((time.monotonic() - self.started) * 1000)
        self.emit(out, "RUN_FINISHED", data, duration_ms=duration, **fields)
        self.run = None

    def error(self, data: dict[str, Any], out: list[Item]) -> None:
        message = pick(data, "message", "error") or "agent error"
        self.emit(out, "RUN_ERROR", data, message=str(message), error=str(message))
        self.run = None
        self.message = None
        self.tools = {}

    def not_interrupted(self) -> None:
        self.interrupted_on = self.interrupted_run = None

    # ----------------------------------------------------------------- content
    def text(self, name: str, run_id: str | None, data: dict[str, Any], out: list[Item]) -> None:
        if name == "TEXT_MESSAGE_END" and self.message is None:
            return
        self.ensure_run(run_id, out)
        given = pick(data, "message_id", "messageId")
        starts = name == "TEXT_MESSAGE_START"
        if starts or (name == "TEXT_MESSAGE_CONTENT" and self.message is None):
            if self.message is not None:
                self.end_message(out)
            self.message = str(given or f"{self.run}-msg-{next(_ids)}")
            role = data.get("role") if starts else None
            self.emit(
                out,
                "TEXT_MESSAGE_START",
                data if starts else {},
                message_id=self.message,
                messageId=self.message,
                role=role or "assistant",
            )
            if starts:
                return
        if name == "TEXT_MESSAGE_CONTENT":
            text = str(pick(data, "text", "delta") or "")
            ids = {"message_id": self.message, "messageId": self.message}
            self.emit(out, name, data, **ids, text=text, delta=text)
        elif name == "TEXT_MESSAGE_END":
            self.end_message(out, data)
        else:  # TEXT_MESSAGE_CHUNK
            self.emit(out, name, data)

    def tool(self, name: str, run_id: str | None, data: dict[str, Any], out: list[Item]) -> None:
        given = pick(data, "tool_call_id", "toolCallId")
        if name == "TOOL_CALL_START":
            self._start_tool(given, run_id, data, out)
            return
        tool_id = str(given) if given is not None else next(reversed(self.tools), None)
        if self.run is None or tool_id not in self.tools:
            return  # the end of a call this stream never opened
        ids = {"tool_call_id": tool_id, "toolCallId": tool_id}
        if name != "TOOL_CALL_END":  # TOOL_CALL_ARGS, TOOL_CALL_RESULT, TOOL_CALL_CHUNK
            self.emit(out, name, data, **ids)
            return
        tool = self.tools.pop(tool_id)
        self.emit(out, name, data, tool=tool, **ids)
        result = data.get("result")
        if result is not None:
            content = result if isinstance(result, str) else json.dumps(result, default=str)
            self.emit(
                out,
                "TOOL_CALL_RESULT",
                {},
                tool=tool,
                **ids,
                messageId=f"{tool_id}-result",
                content=content,
                role="tool",
            )

    def _start_tool(
        self, given: Any, run_id: str | None, data: dict[str, Any], out: list[Item]
    ) -> None:
        self.ensure_run(run_id, out)
        tool_id = str(given or f"{self.run}-tool-{next(_ids)}")
        tool = str(pick(data, "tool", "toolCallName", "name") or "tool")
        self.tools[tool_id] = tool
        ids = {"tool_call_id": tool_id, "toolCallId": tool_id}
        fields: dict[str, Any] = {"tool": tool, **ids, "toolCallName": tool}
        if self.message is not None:
            fields["parentMessageId"] = self.message
        self.emit(out, "TOOL_CALL_START", data, **fields)
        args = data.get("args")
        if args is not None:
            self.emit(out, "TOOL_CALL_ARGS", {}, **ids, delta=json.dumps(args, default=str))

    # ----------------------------------------------------------------- approvals
    def interrupt(self, asked: c.ApprovalRequested, ts: str, out: list[Item]) -> None:
        """The run waits for an operator: finished with AG-UI's interrupt outcome."""
        interrupt = interrupt_of(self.agent, asked, ts, next(reversed(self.tools), None))
        run = self.run
        outcome = {"type": "interrupt", "interrupts": [interrupt]}
        self.finish({}, out, outcome=outcome)
        self.interrupted_on = asked.id
        self.interrupted_run = run

    def resume(self, why: dict[str, Any], out: list[Item]) -> None:
        self.resumes += 1
        base = self.source or self.interrupted_run or self.agent
        source = self.source
        resumed_from = self.interrupted_run
        self.open(f"{base}-resume-{self.resumes}", {}, out, resumed_from=resumed_from, **why)
        self.source = source  # the runtime keeps its own run_id for the rest of the tick
        self.not_interrupted()
