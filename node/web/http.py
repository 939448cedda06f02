"""What every area's handlers share: problem+json errors (RFC 9457) and the parsing of query
strings and JSON bodies into typed values, or a 400 that says why."""

from __future__ import annotations

import json
from typing import Annotated, Any

import msgspec
from aiohttp import web

from node.context import NodeContext
from node.web.routes import Query

NonNegative = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
PROBLEM_TYPE = "application/problem+json"
_TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    409: "Conflict",
    413: "Payload Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class Problem(Exception):
    """Raised by handlers and services; the middleware turns it into a problem+json answer."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        title: str | None = None,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.title = title or _TITLES.get(status, "Error")
        self.headers = headers
        self.extra = extra


MAX_PROBLEMS = 10  # problems an error's detail lists; the rest are counted
MAX_PROBLEM_CHARS = 300  # of each


def problem_list(problems: list[str]) -> str:
    """Problems for one error's `detail`, bounded: a body naming 50,000 bad keys was 5.6 MB."""
    shown = [p if len(p) <= MAX_PROBLEM_CHARS else p[:MAX_PROBLEM_CHARS] + "…" for p in problems]
    more = len(shown) - MAX_PROBLEMS
    return "; ".join(shown[:MAX_PROBLEMS]) + (f"; and {more} more" if more > 0 else "")


def problem_response(
    status: int,
    detail: str,
    *,
    title: str | None = None,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> web.Response:
    body = {
        "type": "about:blank",
        "title": title or _TITLES.get(status, "Error"),
        "status": status,
        "detail": detail,
        **extra,
    }
    return web.Response(
        status=status, text=json.dumps(body), content_type=PROBLEM_TYPE, headers=headers
    )


def problem_for(exc: web.HTTPException, request: web.Request) -> web.Response | None:
    """aiohttp's own error (404, 405, 413, ...) as problem+json; None for what aiohttp should
    answer as it is (redirects, and errors that already carry a problem body)."""
    if exc.status < 400 or exc.content_type == PROBLEM_TYPE:
        return None
    headers = {k: v for k, v in exc.headers.items() if k.lower() in ("allow", "www-authenticate")}
    return problem_response(exc.status, _detail_of(exc, request), headers=headers)


def _detail_of(exc: web.HTTPException, request: web.Request) -> str:
    if exc.status == 404:
        return f"no resource at {request.path}"
    if exc.status == 405:
        return f"{request.method} is not allowed on {request.path}"
    if exc.status == 413:
        return "the request body is too large"
    return exc.reason


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
        raise Problem(
            400, f"query parameter `{name}` must be a non-negative integer, at most {MAX_INT_QUERY}"
        )
    return min(value, clamp) if clamp is not None else value


SINCE = Query("since", NonNegative, "entries after this seq (default 0)")


def limit_param(default: int) -> Query:
    text = f"maximum entries (default {default}, clamped to {MAX_LIMIT})"
    return Query("limit", NonNegative, text)


def limit_query(request: web.Request, default: int) -> int:
    return int_query(request, "limit", default, clamp=MAX_LIMIT)


def page_bytes(ctx: NodeContext) -> int:
    """About how many bytes a page of a list may weigh (`node.page_max_kb`): a page stops there,
    and its cursor lets the client go on."""
    return ctx.config.node.page_max_kb * 1024


def required_query(request: web.Request, name: str) -> str:
    value = request.query.get(name, "")
    if not value:
        raise Problem(400, f"query parameter `{name}` is required")
    return value


def json_response(data: object, status: int = 200) -> web.Response:
    return web.Response(
        body=msgspec.json.encode(data), status=status, content_type="application/json"
    )
