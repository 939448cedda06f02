"""OpenAI's chat completions with `stream: true` (vLLM, llama.cpp, Ollama, OpenAI, ...).

Text arrives as `delta.content`, tool calls as `delta.tool_calls` pieces keyed by `index`
(the first piece of each has its `id` and `function.name`, the rest append to
`function.arguments`), `finish_reason` on the last choice chunk, and `usage` in a last chunk
without choices (asked for with `stream_options.include_usage`). The stream ends with
`data: [DONE]`; a stream that ends after its `finish_reason` without it is accepted (some
servers do), one that ends before is an error.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from node.inference.models import Model
from node.inference.request import ChatRequest
from node.inference.stream import (
    Completion,
    Deltas,
    ProviderError,
    count,
    error_in,
    json_chunk,
    obj,
    post_streamed,
)

Calls = dict[int, dict[str, Any]]  # the tool calls begun, by their `index`


def body_of(model: Model, chat: ChatRequest) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model.model,
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": chat.messages,
        "max_tokens": chat.max_tokens or model.max_tokens,
    }
    if chat.temperature is not None:
        body["temperature"] = chat.temperature
    if chat.tools:
        body["tools"] = chat.tools
    if chat.tool_choice is not None:
        body["tool_choice"] = chat.tool_choice
    if chat.response_format is not None:
        body["response_format"] = chat.response_format
    return body


async def complete(
    session: aiohttp.ClientSession, model: Model, chat: ChatRequest, deltas: Deltas
) -> Completion:
    where = f"inference {model.alias}"
    key = model.key()
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    answer = Completion(model=model.model, where=where, deltas=deltas)
    calls: Calls = {}
    done = False

    def on_data(data: str) -> bool:
        nonlocal done
        if data == "[DONE]":
            done = True
            return True
        chunk = json_chunk(data, where)
        if chunk is not None:
            _take(chunk, answer, calls)
        return False

    body = body_of(model, chat)
    await post_streamed(session, model, "/chat/completions", headers, body, on_data)
    if answer.finish_reason is None:
        if not done:
            raise ProviderError(f"{where} stream ended before it finished")
        answer.finish_reason = "stop"  # [DONE] without a finish_reason: an old server
    return answer


def _take(chunk: dict[str, Any], answer: Completion, calls: Calls) -> None:
    error_in(chunk, answer.where)
    if isinstance(chunk.get("model"), str):
        answer.model = chunk["model"][:200]
    usage = chunk.get("usage")
    if isinstance(usage, dict):
        answer.input_tokens = count(usage.get("prompt_tokens"))
        answer.output_tokens = count(usage.get("completion_tokens"))
    choices = chunk.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return
    choice = choices[0]
    delta = obj(choice.get("delta"))
    content = delta.get("content")
    if isinstance(content, str) and content:
        answer.add_text(content)
    for piece in delta.get("tool_calls") or ():
        if isinstance(piece, dict):
            _tool_piece(piece, answer, calls)
    reason = choice.get("finish_reason")
    if isinstance(reason, str) and reason:
        answer.finish_reason = reason[:40]


def _tool_piece(piece: dict[str, Any], answer: Completion, calls: Calls) -> None:
    where = answer.where
    index = piece.get("index", 0)
    function = obj(piece.get("function"))
    if not isinstance(index, int) or isinstance(index, bool):
        raise ProviderError(f"{where} sent a tool call without an index")
    call = calls.get(index)
    if call is None:
        call_id, name = piece.get("id"), function.get("name")
        if not isinstance(call_id, str) or not isinstance(name, str):
            raise ProviderError(f"{where} began a tool call without its id and name")
        call = calls[index] = answer.start_call(call_id, name)
    arguments = function.get("arguments")
    if isinstance(arguments, str) and arguments:
        answer.add_arguments(call, arguments)
