"""Answers given in advance, for `agent test --infer-file` (node/authoring/): each is a text
(the assistant's words) or an object of the chat answer's shape (`{"message": {"content",
"tool_calls"}, "finish_reason"?, "usage"?}`), turned into what the node would hand the agent
for the request it made: plain text for `{"prompt"}`, the chat answer's JSON otherwise."""

from __future__ import annotations

import json
from typing import Any

from node.inference.request import parse
from node.runtime.hostapi import HostError


def load(text: str) -> list[Any]:
    """The answers of an --infer-file: a JSON list of them (or one answer)."""
    value = json.loads(text)
    answers = value if isinstance(value, list) else [value]
    for i, answer in enumerate(answers):
        if not isinstance(answer, str | dict) or (
            isinstance(answer, dict) and not isinstance(answer.get("message", {}), dict)
        ):
            raise ValueError(f"answer {i}: a text or an object with a `message` object")
    return answers


def answer_of(request: str, given: Any, model: str = "test") -> str:
    chat = parse(request)  # a bad request fails as on a node
    if isinstance(given, str):
        given = {"message": {"role": "assistant", "content": given}}
    message = {"role": "assistant", "content": None, **given.get("message", {})}
    if chat.plain:
        return str(message.get("content") or "")
    calls = message.get("tool_calls") or []
    usage = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0, "cost": "0"}
    return json.dumps(
        {
            "message": message,
            "finish_reason": given.get("finish_reason", "tool_calls" if calls else "stop"),
            "usage": {**usage, **given.get("usage", {})},
            "model": chat.model or model,
            "provider_model": model,
        }
    )


def exhausted(count: int) -> HostError:
    return HostError("failed", f"--infer-file has no answer left (it gave {count})")
