"""What an agent's MCP exports return, checked before a client sees it: content items (a tool's
result, a prompt's messages), resource contents, prompt results.

An agent is not trusted to speak MCP: its JSON is parsed with the node's bounds, each item is
rebuilt from the fields MCP defines for its type (anything else is dropped), base64 is checked,
text is redacted like every tool result (secret values the agent read never reach a client),
and the counts are bounded. A reply that does not fit is the agent's fault, reported as such
(`ContentError`), never passed through.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any

from node.web.boundedjson import loads

MAX_ITEMS = 100  # content items of one result, messages of one prompt, contents of one read
MAX_FIELD = 1024  # a URI, a name or a MIME type
ROLES = ("user", "assistant")
Redact = Callable[[str], str]


class ContentError(ValueError):
    """The agent's reply is not what its export promises."""


def parse_json(text: str, what: str) -> Any:
    try:
        return loads(text.encode())
    except ValueError as e:
        raise ContentError(f"{what} is not JSON: {e}") from None


def content_items(text: str, redact: Redact) -> list[dict[str, Any]]:
    """A `call-tool-content` result: a JSON list of content items."""
    items = parse_json(text, "the tool's content")
    if not isinstance(items, list) or not items or len(items) > MAX_ITEMS:
        raise ContentError(f"the tool's content must be a list of 1 to {MAX_ITEMS} items")
    return [content_item(item, redact) for item in items]


def content_item(item: Any, redact: Redact) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise ContentError("a content item must be an object")
    kind = item.get("type")
    if kind == "text":
        return {"type": "text", "text": redact(_text(item, "text"))}
    if kind in ("image", "audio"):
        return {"type": kind, "data": _base64(item, "data"), "mimeType": _field(item, "mimeType")}
    if kind == "resource":
        return {"type": "resource", "resource": resource_content(item.get("resource"), redact)}
    if kind == "resource_link":
        link = {"type": "resource_link", "uri": _field(item, "uri"), "name": _field(item, "name")}
        for optional in ("description", "mimeType", "title"):
            if isinstance(item.get(optional), str):
                link[optional] = item[optional][:4096]
        return link
    raise ContentError(f"unknown content type {str(kind)[:40]!r}")


def resource_content(content: Any, redact: Redact) -> dict[str, Any]:
    if not isinstance(content, dict):
        raise ContentError("a resource content must be an object")
    out: dict[str, Any] = {"uri": _field(content, "uri")}
    if isinstance(content.get("mimeType"), str):
        out["mimeType"] = _field(content, "mimeType")
    if "text" in content:
        out["text"] = redact(_text(content, "text"))
    elif "blob" in content:
        out["blob"] = _base64(content, "blob")
    else:
        raise ContentError("a resource content needs `text` or `blob`")
    return out


def resource_contents(text: str, redact: Redact) -> list[dict[str, Any]]:
    """A `read-resource` result: a JSON list of resource contents."""
    contents = parse_json(text, "the resource")
    if not isinstance(contents, list) or not contents or len(contents) > MAX_ITEMS:
        raise ContentError(f"a resource read must give 1 to {MAX_ITEMS} contents")
    return [resource_content(c, redact) for c in contents]


def prompt_result(text: str, redact: Redact) -> dict[str, Any]:
    """A `get-prompt` result: {description?, messages: [{role, content}]}."""
    result = parse_json(text, "the prompt")
    messages = result.get("messages") if isinstance(result, dict) else None
    if not isinstance(messages, list) or len(messages) > MAX_ITEMS:
        raise ContentError(f"a prompt must give `messages`, a list of at most {MAX_ITEMS}")
    out: dict[str, Any] = {"messages": []}
    if isinstance(result.get("description"), str):
        out["description"] = redact(result["description"][:4096])
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise ContentError("a prompt message needs a `role` of user or assistant")
        content = content_item(message.get("content"), redact)
        out["messages"].append({"role": message["role"], "content": content})
    return out


def _text(item: dict[str, Any], key: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise ContentError(f"`{key}` must be a string")
    return value


def _field(item: dict[str, Any], key: str) -> str:
    value = _text(item, key)
    if not value or len(value) > MAX_FIELD:
        raise ContentError(f"`{key}` must be a non-empty string of at most {MAX_FIELD}")
    return value


def _base64(item: dict[str, Any], key: str) -> str:
    value = _text(item, key)
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ContentError(f"`{key}` must be base64") from None
    return value
