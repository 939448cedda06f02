"""Parsing of query strings and JSON bodies into typed values, or a 400 that says why."""

from __future__ import annotations

from typing import TypeVar

import msgspec
from aiohttp import web

from node.boundedjson import JsonBoundsError, loads_as
from node.errors import Problem

T = TypeVar("T")
MAX_LIMIT = 1000
MAX_QUERY_INT = 2**63 - 1  # positions and sequence numbers are signed 64-bit


def int_query(request: web.Request, name: str, default: int, *, clamp: int | None = None) -> int:
    """A non-negative integer query parameter; anything else is a 400 naming it."""
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isascii() or not raw.isdigit() or len(raw) > 20 or int(raw) > MAX_QUERY_INT:
        raise Problem(
            400,
            f"query parameter `{name}` must be a non-negative integer below 2**63, "
            f"got {raw[:40]!r}",
        )
    value = int(raw)
    return min(value, clamp) if clamp is not None else value


def limit_query(request: web.Request, default: int) -> int:
    return int_query(request, "limit", default, clamp=MAX_LIMIT)


def required_query(request: web.Request, name: str) -> str:
    value = request.query.get(name, "")
    if not value:
        raise Problem(400, f"query parameter `{name}` is required")
    return value


async def json_body(request: web.Request, kind: type[T]) -> T:
    """Decode (bounded: node.boundedjson) and validate; msgspec's message names the bad field."""
    body = await request.read()
    if not body:
        raise Problem(400, "the request needs a JSON body")
    try:
        return loads_as(body, kind)
    except msgspec.ValidationError as exc:
        raise Problem(400, f"invalid body: {str(exc).replace('`$.', '`')}") from None
    except JsonBoundsError as exc:
        raise Problem(400, f"JSON body refused: {exc}") from None
    except ValueError as exc:
        raise Problem(400, str(exc)) from None


def json_response(data: object, status: int = 200) -> web.Response:
    return web.Response(
        body=msgspec.json.encode(data), status=status, content_type="application/json"
    )
