"""An agent's inference request, checked: `{"prompt"}` (answered with plain text) or a chat
(`messages`, `tools`, `tool_choice`, `response_format`, ...; answered with JSON).

The chat is kept in OpenAI's chat-completions shape, which the Anthropic adapter translates;
everything the agent sends is bounded and checked here, so a provider never sees junk and a
bad request is the agent's clear `failed` error, not the provider's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from node.runtime.hostapi import HostError
from node.web import boundedjson

MAX_REQUEST_BYTES = 4 << 20  # a whole request (a conversation of many turns)
MAX_MESSAGES = 1000
MAX_TOOLS = 128
MAX_NAME = 64
ROLES = ("system", "user", "assistant", "tool")
TOOL_CHOICES = ("auto", "none", "required")


@dataclass(frozen=True)
class ChatRequest:
    messages: list[dict[str, Any]]
    plain: bool  # the `{"prompt"}` form: the answer is its text alone
    model: str | None = None  # an alias (or the old `route`)
    max_tokens: int | None = None
    temperature: float | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_choice: Any = None
    response_format: dict[str, Any] | None = None

    def estimated_input_tokens(self) -> int:
        """A bound of the prompt's tokens before the provider counts them (4 bytes a token,
        rounded up): what a budget and a policy judge a call by beforehand."""
        size = sum(len(str(m.get("content") or "")) for m in self.messages)
        size += sum(len(str(t)) for t in self.tools)
        return size // 4 + 1


def _fail(message: str) -> HostError:
    return HostError("failed", f"inference request: {message}")


def parse(text: str) -> ChatRequest:
    if len(text.encode("utf-8", "replace")) > MAX_REQUEST_BYTES:
        raise _fail(f"larger than {MAX_REQUEST_BYTES} bytes")
    try:
        request = boundedjson.loads(text)
    except ValueError:
        raise _fail("not JSON") from None
    if not isinstance(request, dict):
        raise _fail("expected a JSON object")
    model = request.get("model", request.get("route"))
    if model is not None and (not isinstance(model, str) or not 0 < len(model) <= MAX_NAME):
        raise _fail("`model` is a model alias (a string)")
    max_tokens = request.get("max_tokens")
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens <= 0
    ):
        raise _fail("`max_tokens` must be a positive integer")
    temperature = request.get("temperature")
    if temperature is not None and (
        isinstance(temperature, bool)
        or not isinstance(temperature, int | float)
        or not 0 <= temperature <= 2
    ):
        raise _fail("`temperature` is a number from 0 to 2")
    common: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "temperature": temperature}
    if "messages" not in request:
        if not isinstance(request.get("prompt"), str):
            raise HostError("failed", "inference request needs a string `prompt` or `messages`")
        return ChatRequest([{"role": "user", "content": request["prompt"]}], True, **common)
    return ChatRequest(
        messages=_messages(request["messages"]),
        plain=False,
        tools=_tools(request.get("tools")),
        tool_choice=_tool_choice(request.get("tool_choice")),
        response_format=_response_format(request.get("response_format")),
        **common,
    )


def _messages(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not 0 < len(raw) <= MAX_MESSAGES:
        raise _fail(f"`messages` is a list of 1 to {MAX_MESSAGES} messages")
    return [_message(i, m) for i, m in enumerate(raw)]


def _message(i: int, raw: Any) -> dict[str, Any]:
    where = f"messages[{i}]"
    if not isinstance(raw, dict) or raw.get("role") not in ROLES:
        raise _fail(f"{where} needs a `role` of {', '.join(ROLES)}")
    role, content = raw["role"], raw.get("content")
    message: dict[str, Any] = {"role": role, "content": content}
    if role == "assistant" and raw.get("tool_calls"):
        message["tool_calls"] = _tool_calls(where, raw["tool_calls"])
        if content is not None and not isinstance(content, str):
            raise _fail(f"{where}.content is a string or null")
    elif not isinstance(content, str):
        raise _fail(f"{where}.content is a string")
    if role == "tool":
        call_id = raw.get("tool_call_id")
        if not isinstance(call_id, str) or not 0 < len(call_id) <= 200:
            raise _fail(f"{where} (a tool result) needs the string `tool_call_id` it answers")
        message["tool_call_id"] = call_id
    return message


def _tool_calls(where: str, raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or len(raw) > MAX_TOOLS:
        raise _fail(f"{where}.tool_calls is a list of at most {MAX_TOOLS}")
    calls = []
    for j, call in enumerate(raw):
        function = call.get("function") if isinstance(call, dict) else None
        if (
            not isinstance(function, dict)
            or not isinstance(call.get("id"), str)
            or not isinstance(function.get("name"), str)
            or not isinstance(function.get("arguments", ""), str)
        ):
            raise _fail(
                f"{where}.tool_calls[{j}] needs `id` and `function` "
                "{name, arguments (a JSON text)}"
            )
        calls.append(
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": function["name"], "arguments": function.get("arguments", "")},
            }
        )
    return calls


def _tools(raw: Any) -> list[dict[str, Any]]:
    if raw is None:
        return []
    if not isinstance(raw, list) or len(raw) > MAX_TOOLS:
        raise _fail(f"`tools` is a list of at most {MAX_TOOLS} functions")
    tools = []
    names: set[str] = set()
    for i, tool in enumerate(raw):
        function = tool.get("function") if isinstance(tool, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME or name in names:
            raise _fail(f"tools[{i}] needs a `function` with a unique `name` (at most 64)")
        names.add(name)
        parameters = function.get("parameters", {"type": "object", "properties": {}})  # type: ignore[union-attr]
        if not isinstance(parameters, dict):
            raise _fail(f"tools[{i}].function.parameters is a JSON Schema object")
        description = function.get("description", "")  # type: ignore[union-attr]
        if not isinstance(description, str):
            raise _fail(f"tools[{i}].function.description is a string")
        spec = {"name": name, "description": description, "parameters": parameters}
        tools.append({"type": "function", "function": spec})
    return tools


def _tool_choice(raw: Any) -> Any:
    if raw is None or raw in TOOL_CHOICES:
        return raw
    function = raw.get("function") if isinstance(raw, dict) else None
    if isinstance(function, dict) and isinstance(function.get("name"), str):
        return {"type": "function", "function": {"name": function["name"]}}
    raise _fail('`tool_choice` is "auto", "none", "required" or {"function": {"name"}}')


def _response_format(raw: Any) -> dict[str, Any] | None:
    if raw is None:
        return None
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind in ("text", "json_object"):
        return {"type": kind}
    schema: dict[str, Any] = raw.get("json_schema") if isinstance(raw, dict) else None  # type: ignore[assignment]
    if kind == "json_schema" and _has_schema(schema):
        name = schema.get("name", "answer")
        if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME:
            raise _fail("`response_format.json_schema.name` is a string of at most 64")
        entry = {"name": name, "schema": schema["schema"], "strict": bool(schema.get("strict"))}
        return {"type": "json_schema", "json_schema": entry}
    raise _fail('`response_format` is {"type": "json_schema", "json_schema": {name, schema}}')


def _has_schema(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("schema"), dict)
