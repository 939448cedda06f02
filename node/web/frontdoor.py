"""The one middleware every request passes: its id and log context, the access check, problem
answers, headers for a part of the site (the console's), and the duration metric.

One layer instead of four: every aiohttp middleware is a coroutine that a request enters and
that each resumption of the handler passes back through, which POST /api/v1/findings measured
(issue 26, bench/RESULTS.md). The parts stay where their subject lives: request ids in
logsetup, scopes in auth, problem bodies in http."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler

from eventstore.writer import Fenced
from node.context import CONTEXT
from node.ops.logsetup import REQUEST_ID_HEADER, enter_request, leave_request
from node.web.auth import IDENTITY, TOKEN_DIGEST, refusal
from node.web.body import ClientLeft
from node.web.http import Problem, problem_for, problem_response
from node.web.inflight import REQUESTS, TICKET, release_request

log = logging.getLogger(__name__)

_STREAM_TYPE = "text/event-stream"
HEALTH_PATH = "/api/v1/health"

# (path prefix, headers) every response under the prefix carries: set here rather than by an
# `on_response_prepare` hook, which aiohttp awaits for every response of every path
PATH_HEADERS: web.AppKey[list[tuple[str, Mapping[str, str]]]] = web.AppKey("path_headers", list)


def add_path_headers(app: web.Application, prefix: str, headers: Mapping[str, str]) -> None:
    app.setdefault(PATH_HEADERS, []).append((prefix, headers))


def _path_headers(request: web.Request) -> Mapping[str, str]:
    path = request.path
    for prefix, headers in request.app.get(PATH_HEADERS, ()):
        if path.startswith(prefix):
            return headers
    return {}


def _reserved_refusal(request: web.Request) -> web.Response | None:
    """On a connection slot kept for operators (node/web/connections.py): only the health
    check and admin tokens; anything else a 503, and the slot is given back."""
    identity = request.get(IDENTITY)
    if request.path == HEALTH_PATH or (identity is not None and "admin" in identity.scopes):
        return None
    request.app[CONTEXT].metrics.count_connection("reserved_refused")
    response = problem_response(
        503,
        "this node has too many open connections; retry shortly",
        headers={"Retry-After": "1"},
    )
    response.force_close()
    return response


@web.middleware
async def front_door(request: web.Request, handler: Handler) -> web.StreamResponse:
    started = time.perf_counter()
    request_id, context = enter_request(request)
    protocol = request.protocol
    try:
        refused = refusal(request)
        if getattr(protocol, "reserved", False):
            refused = _reserved_refusal(request) or refused
        if refused is None:
            token = request.get(TOKEN_DIGEST)
            if token is not None:  # counted until its answer is written (node/web/inflight.py)
                request[TICKET] = request.app[REQUESTS].take(token)
            response = await handler(request)
        else:
            response = refused
    except Problem as exc:
        response = problem_response(
            exc.status, exc.detail, title=exc.title, headers=exc.headers, **exc.extra
        )
    except Fenced as exc:  # a placed agent's journal this node may not write now (docs/mesh.md)
        response = problem_response(
            503, f"{exc}: the agent runs on another node now, or is moving; ask its home"
        )
    except web.HTTPException as exc:
        answer = problem_for(exc, request)
        if answer is None:  # a redirect, or already a problem: aiohttp answers it as it is
            exc.headers.update(_path_headers(request))
            exc.headers[REQUEST_ID_HEADER] = request_id
            raise
        response = answer
    except ClientLeft:  # mid-body (node/web/body.py): counted there; nobody reads this
        response = problem_response(400, "the client closed the connection before its body")
        response.force_close()
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        response = problem_response(500, "the node failed to handle this request; see its log")
    finally:
        leave_request(context)
        if not getattr(protocol, "releases_after_write", False):
            release_request(request)
    if not response.prepared:
        response.headers.update(_path_headers(request))
        response.headers[REQUEST_ID_HEADER] = request_id
        if response.status >= 400 and not request.content.is_eof():
            # refused before its body was read (401, 408, 429, ...): the connection closes
            # once this is written and the rest of the body had a second to come
            # (node/server.py LINGER_SECS), and the client is told so
            response.force_close()
    if not response.headers.get(hdrs.CONTENT_TYPE, "").startswith(_STREAM_TYPE):
        request.app[CONTEXT].metrics.request_duration.observe(time.perf_counter() - started)
    return response
