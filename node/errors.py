"""problem+json (RFC 9457) for every client error, and no stack trace for anything else."""

from __future__ import annotations

import json
import logging
from typing import Any

from aiohttp import web

log = logging.getLogger(__name__)
PROBLEM_TYPE = "application/problem+json"
_TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Payload Too Large",
    415: "Unsupported Media Type",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class Problem(Exception):
    """Raised by handlers and services; the middleware turns it into a problem+json answer."""

    def __init__(self, status: int, detail: str, *, title: str | None = None, **extra: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.title = title or _TITLES.get(status, "Error")
        self.extra = extra


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


@web.middleware
async def problem_middleware(request: web.Request, handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except Problem as exc:
        return problem_response(exc.status, exc.detail, title=exc.title, **exc.extra)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        if exc.content_type == PROBLEM_TYPE:
            raise
        headers = {
            k: v for k, v in exc.headers.items() if k.lower() in ("allow", "www-authenticate")
        }
        return problem_response(exc.status, _detail_of(exc, request), headers=headers)
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return problem_response(500, "the node failed to handle this request; see its log")


def _detail_of(exc: web.HTTPException, request: web.Request) -> str:
    if exc.status == 404:
        return f"no resource at {request.path}"
    if exc.status == 405:
        return f"{request.method} is not allowed on {request.path}"
    if exc.status == 413:
        return "the request body is too large"
    return exc.reason
