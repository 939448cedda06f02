"""Parsing of query strings and JSON bodies into typed values, or a 400 that says why."""

from __future__ import annotations

from typing import TypeVar

import msgspec
from aiohttp import web

from node.errors import Problem

T = TypeVar("T")
MAX_LIMIT = 1000
# Positions, seqs and cursors are 64-bit signed in the journal: anything larger is a 400.
MAX_INT_QUERY = 2**63 - 1


def int_query(request: web.Request, name: str, default: int, *, clamp: int | None = None) -> int:
    """A non-negative integer query parameter up to MAX_INT_QUERY; anything else is a 400."""
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isascii() or not raw.isdigit():
        raise Problem(
            400, f"query parameter `{name}` must be a non-negative integer, got {raw[:40]!r}"
        )
    value = int(raw) if len(raw) <= 19 else MAX_INT_QUERY + 1
    if value > MAX_INT_QUERY:
        raise Problem(400, f"query parameter `{name}` must be at most {MAX_INT_QUERY}")
    return min(value, clamp) if clamp is not None else value


def limit_query(request: web.Request, default: int) -> int:
    return int_query(request, "limit", default, clamp=MAX_LIMIT)


def required_query(request: web.Request, name: str) -> str:
    value = request.query.get(name, "")
    if not value:
        raise Problem(400, f"query parameter `{name}` is required")
    return value


async def json_body(request: web.Request, kind: type[T]) -> T:
    """Decode and validate the body in one pass; msgspec's message names the bad field."""
    body = await request.read()
    if not body:
        raise Problem(400, "the request needs a JSON body")
    try:
        return msgspec.json.decode(body, type=kind)
    except msgspec.ValidationError as exc:
        raise Problem(400, f"invalid body: {str(exc).replace('`$.', '`')}") from None
    except msgspec.DecodeError as exc:
        raise Problem(400, f"malformed JSON: {exc}") from None


def json_response(data: object, status: int = 200) -> web.Response:
    return web.Response(
        body=msgspec.json.encode(data), status=status, content_type="application/json"
    )
