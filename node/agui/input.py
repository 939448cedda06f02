"""AG-UI 1.0 `RunAgentInput`, as far as the node reads it, and the user text it carries.

Decoded leniently (unknown fields ignored: newer clients send more); a body that is not a
RunAgentInput is a 400 before any stream opens, the transport's own rejection.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec


class ResumeEntry(msgspec.Struct, kw_only=True, rename="camel"):
    interrupt_id: str
    status: Literal["resolved", "cancelled"]
    payload: Any = None
    metadata: dict[str, Any] | None = None


class RunInput(msgspec.Struct, kw_only=True, rename="camel"):
    thread_id: str
    run_id: str
    parent_run_id: str | None = None
    protocol_version: str | None = None
    state: Any = None
    messages: list[dict[str, Any]] = []
    tools: list[Any] = []
    context: list[Any] = []
    forwarded_props: Any = None
    resume: list[ResumeEntry] | None = None


def last_user_message(run: RunInput) -> dict[str, Any] | None:
    """The newest message when it is the user's (what a new run is asked to do), else None."""
    if run.messages and run.messages[-1].get("role") == "user":
        return run.messages[-1]
    return None


def text_of(message: dict[str, Any]) -> str:
    """A user message's text: its string content, or its text parts joined."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""
