"""Anthropic's Messages API with `stream: true`, translated to and from the chat shape.

Going out: system messages become `system`; an assistant's `tool_calls` become `tool_use`
blocks and `tool` messages `tool_result` blocks of a user turn (consecutive turns of one role
merge, as the API wants them alternating); `tools` become `{name, description, input_schema}`;
`tool_choice` auto/required/none/a function become auto/any/none/tool; a `response_format`
JSON Schema, which the API has no field for, is asked for in the system prompt.

Coming back: `message_start` (the model, input tokens), `content_block_start` (text or a
`tool_use` with its id and name), `content_block_delta` (`text_delta`, `input_json_delta`),
`message_delta` (the stop reason, output tokens), `message_stop` (the end), `error`.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from node.inference.models import Model
from node.inference.request import ChatRequest
from node.inference.stream import (
    Completion,
    Deltas,
    ProviderError,
    count,
    dumps,
    error_in,
    json_chunk,
    obj,
    post_streamed,
)

VERSION = "2023-06-01"
STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


def body_of(model: Model, chat: ChatRequest) -> dict[str, Any]:
    system = [m["content"] for m in chat.messages if m["role"] == "system"]
    if chat.response_format and chat.response_format.get("type") == "json_schema":
        schema = dumps(chat.response_format["json_schema"]["schema"])
        system.append(f"Answer with one JSON value only, valid against this JSON Schema: {schema}")
    elif chat.response_format and chat.response_format.get("type") == "json_object":
        system.append("Answer with one JSON object only.")
    body: dict[str, Any] = {
        "model": model.model,
        "stream": True,
        "max_tokens": chat.max_tokens or model.max_tokens,
        "messages": _turns(chat.messages),
    }
    if system:
        body["system"] = "\n\n".join(system)
    if chat.temperature is not None:
        body["temperature"] = min(chat.temperature, 1.0)
    if chat.tools:
        body["tools"] = [
            {
                "name": t["function"]["name"],
                "description": t["function"]["description"],
                "input_schema": t["function"]["parameters"],
            }
            for t in chat.tools
        ]
    choice = chat.tool_choice
    if isinstance(choice, dict):
        body["tool_choice"] = {"type": "tool", "name": choice["function"]["name"]}
    elif choice is not None and chat.tools:
        body["tool_choice"] = {"type": {"auto": "auto", "required": "any", "none": "none"}[choice]}
    return body


def _turns(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = []
    for message in messages:
        role, blocks = _blocks(message)
        if role is None:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return turns


def _blocks(message: dict[str, Any]) -> tuple[str | None, list[dict[str, Any]]]:
    role, content = message["role"], message.get("content")
    if role == "system":
        return None, []
    if role == "tool":
        result = {"type": "tool_result", "tool_use_id": message["tool_call_id"], "content": content}
        return "user", [result]
    blocks: list[dict[str, Any]] = [{"type": "text", "text": content}] if content else []
    for call in message.get("tool_calls", ()):
        try:
            arguments = json.loads(call["function"]["arguments"] or "{}")
        except ValueError:
            arguments = {}
        blocks.append(
            {
                "type": "tool_use",
                "id": call["id"],
                "name": call["function"]["name"],
                "input": arguments if isinstance(arguments, dict) else {},
            }
        )
    return role, blocks


async def complete(
    session: aiohttp.ClientSession, model: Model, chat: ChatRequest, deltas: Deltas
) -> Completion:
    where = f"inference {model.alias}"
    headers = {"anthropic-version": VERSION}
    key = model.key()
    if key:
        headers["x-api-key"] = key
    answer = Completion(model=model.model, where=where, deltas=deltas)
    blocks: dict[int, dict[str, Any]] = {}
    stopped = False

    def on_data(data: str) -> bool:
        nonlocal stopped
        event = json_chunk(data, where)
        if event is None:
            return False
        if event.get("type") == "message_stop":
            stopped = True
            return True
        _take(event, answer, blocks)
        return False

    await post_streamed(session, model, "/messages", headers, body_of(model, chat), on_data)
    if not stopped:
        raise ProviderError(f"{where} stream ended before it finished")
    answer.finish_reason = answer.finish_reason or "stop"
    return answer


def _take(event: dict[str, Any], answer: Completion, blocks: dict[int, dict[str, Any]]) -> None:
    where = answer.where
    kind = event.get("type")
    if kind == "error":
        error_in(event, where)
    if kind == "message_start" and isinstance(event.get("message"), dict):
        message = event["message"]
        if isinstance(message.get("model"), str):
            answer.model = message["model"][:200]
        usage = obj(message.get("usage"))
        answer.input_tokens = count(usage.get("input_tokens"))
        answer.output_tokens = count(usage.get("output_tokens"))
    elif kind == "content_block_start":
        block = event.get("content_block")
        index = event.get("index")
        if isinstance(block, dict) and block.get("type") == "tool_use" and isinstance(index, int):
            call_id, name = block.get("id"), block.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise ProviderError(f"{where} began a tool use without its id and name")
            blocks[index] = answer.start_call(call_id, name)
    elif kind == "content_block_delta" and isinstance(event.get("delta"), dict):
        delta = event["delta"]
        if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
            answer.add_text(delta["text"])
        elif delta.get("type") == "input_json_delta" and isinstance(delta.get("partial_json"), str):
            call = blocks.get(event.get("index"))  # type: ignore[arg-type]
            if call is None:
                raise ProviderError(f"{where} sent tool input for no tool use")
            answer.add_arguments(call, delta["partial_json"])
    elif kind == "message_delta":
        delta = obj(event.get("delta"))
        reason = delta.get("stop_reason")
        if isinstance(reason, str):
            answer.finish_reason = STOP_REASONS.get(reason, reason[:40])
        usage = obj(event.get("usage"))
        if "output_tokens" in usage:
            answer.output_tokens = count(usage.get("output_tokens"))
        if "input_tokens" in usage and count(usage.get("input_tokens")):
            answer.input_tokens = count(usage.get("input_tokens"))
