"""AG-UI 1.0 events of one run, built with exactly the protocol's camelCase fields.

The official client strips (and warns about) fields it does not know, so nothing node-specific
rides at the top level; node details go in `metadata` or a CUSTOM event's `value`.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from node.agui.clock import now_ms

Event = dict[str, Any]


class RunEvents:
    def __init__(self, thread_id: str, run_id: str, parent_run_id: str | None = None) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.parent_run_id = parent_run_id

    def _event(self, kind: str, **fields: Any) -> Event:
        return {"type": kind, **fields, "timestamp": now_ms()}

    def started(self, **metadata: Any) -> Event:
        event = self._event("RUN_STARTED", threadId=self.thread_id, runId=self.run_id)
        if self.parent_run_id:
            event["parentRunId"] = self.parent_run_id
        if metadata:
            event["metadata"] = metadata
        return event

    def finished(self, outcome: dict[str, Any], result: Any = None) -> Event:
        event = self._event(
            "RUN_FINISHED", threadId=self.thread_id, runId=self.run_id, outcome=outcome
        )
        if result is not None:
            event["result"] = result
        return event

    def success(self, result: Any = None) -> Event:
        return self.finished({"type": "success"}, result)

    def interrupted(self, interrupts: list[dict[str, Any]]) -> Event:
        return self.finished({"type": "interrupt", "interrupts": interrupts})

    def cancelled(self) -> Event:
        return self.finished({"type": "cancelled"})

    def error(self, message: str, code: str) -> Event:
        return self._event("RUN_ERROR", message=message, code=code)

    def text(self, text: str) -> list[Event]:
        """One whole assistant message (AG-UI needs a non-empty delta, so none when empty)."""
        if not text:
            return []
        message_id = f"{self.run_id}-msg-{uuid.uuid4().hex[:8]}"
        return [
            self._event("TEXT_MESSAGE_START", messageId=message_id, role="assistant"),
            self._event("TEXT_MESSAGE_CONTENT", messageId=message_id, delta=text),
            self._event("TEXT_MESSAGE_END", messageId=message_id),
        ]

    def tool_call(self, call_id: str, name: str, args: Any) -> list[Event]:
        """A whole tool call: what the agent asked to do (its result comes later, if ever)."""
        return [
            self._event("TOOL_CALL_START", toolCallId=call_id, toolCallName=name),
            self._event(
                "TOOL_CALL_ARGS",
                toolCallId=call_id,
                delta=args if isinstance(args, str) else json.dumps(args),
            ),
            self._event("TOOL_CALL_END", toolCallId=call_id),
        ]

    def tool_result(self, call_id: str, content: Any) -> Event:
        return self._event(
            "TOOL_CALL_RESULT",
            messageId=f"{call_id}-result",
            toolCallId=call_id,
            content=content if isinstance(content, str) else json.dumps(content),
            role="tool",
        )

    def custom(self, name: str, value: Any) -> Event:
        return self._event("CUSTOM", name=name, value=value)
