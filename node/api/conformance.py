"""A check that every response matches the node's own OpenAPI document (status, content type
and body schema), for test suites and staging: set AGENT_NODE_CHECK_RESPONSES=1 (every
response) or =sample (the first responses of each route and status, then one in twenty).

The operation is the route's own entry of the document, the status must be documented for it,
the content type must be one it documents, and a JSON body must validate against that schema
(JSON Schema 2020-12, with the document's components). Validators are compiled once per
(operation, status, media type), so a check costs tens of microseconds. It needs `jsonschema`
(a development dependency), so it is off unless asked for. A response that does not conform is
logged at ERROR, counted in `VIOLATIONS`, and replaced by a 500 problem that says why, so
nothing that relies on the document can miss it. Streams (SSE) are not checked: their frames
are documented in prose (docs/streams.md).
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from node.api.openapi import document_of, route_path
from node.web.http import PROBLEM_TYPE, problem_response
from node.web.routes import ROUTES

log = logging.getLogger(__name__)
ENV = "AGENT_NODE_CHECK_RESPONSES"
# ENV=sample: the first SAMPLE_FIRST responses of each (route, method, status) are checked, then
# one in SAMPLE_EVERY. A check costs milliseconds for a page of a list (jsonschema is pure
# Python: 3.1 ms against 0.4 ms for the whole request of a 20-finding page), and the test
# suite's long-lived nodes answer the same polls thousands of times.
SAMPLE = "sample"
SAMPLE_FIRST = 25
SAMPLE_EVERY = 20
VIOLATIONS: list[str] = []  # every mismatch of this process, for a test suite to assert on
_VALIDATORS: web.AppKey[dict[tuple[str, str, int, str], Any]] = web.AppKey("validators", dict)
_SEEN: web.AppKey[dict[tuple[int, str, int], int] | None] = web.AppKey("seen")


def install(app: web.Application) -> None:
    """Check the responses of `app` when the environment asks for it: every one, or a sample."""
    mode = os.environ.get(ENV, "")
    if mode not in ("", "0"):
        app[_VALIDATORS] = {}
        app[_SEEN] = {} if mode == SAMPLE else None
        app.middlewares.insert(0, conformance_middleware)  # outermost: errors are checked too
        app.on_startup.append(_build_document)


async def _build_document(app: web.Application) -> None:
    """Before the first request, which would otherwise wait for it."""
    document_of(app)


@web.middleware
async def conformance_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    response = await handler(request)
    if not isinstance(response, web.Response):
        return response  # a stream: already sent
    if not _sampled(request, response.status):
        return response
    problem = violation(request, response)
    if problem is None:
        return response
    message = f"{request.method} {request.path} → {response.status}: {problem}"
    VIOLATIONS.append(message)
    log.error("response does not match the OpenAPI document: %s", message)
    return problem_response(500, f"the response does not match the OpenAPI document: {problem}")


def _sampled(request: web.Request, status: int) -> bool:
    seen = request.app[_SEEN]
    if seen is None:
        return True
    key = (id(request.match_info.route), request.method, status)
    count = seen[key] = seen.get(key, 0) + 1
    return count <= SAMPLE_FIRST or count % SAMPLE_EVERY == 0


def violation(request: web.Request, response: web.Response) -> str | None:
    route = request.match_info.route
    if route not in request.app[ROUTES]:
        return None  # no such route (aiohttp's own 404/405): nothing is documented for it
    path = route_path(route) or ""
    document = document_of(request.app)
    operation = document["paths"][path][request.method.lower()]
    documented = operation["responses"].get(str(response.status))
    if documented is None:
        return f"status {response.status} is not documented for {request.method} {path}"
    if "$ref" in documented:
        documented = document["components"]["responses"][documented["$ref"].rsplit("/", 1)[1]]
    content = documented.get("content")
    body = response.body if isinstance(response.body, bytes) else b""
    if not content:
        return f"a body where none is documented ({len(body)} bytes)" if body else None
    media = response.content_type
    if media not in content:
        return f"content type {media} is not one of {', '.join(content)}"
    if media not in ("application/json", PROBLEM_TYPE):
        return None  # text: any string conforms
    try:
        value = json.loads(body)
    except ValueError as exc:
        return f"the body is not JSON: {exc}"
    key = (path, request.method, response.status, media)
    validators = request.app[_VALIDATORS]
    validator = validators.get(key)
    if validator is None:
        validator = validators[key] = _compile(content[media].get("schema", {}), document)
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    first = errors[0]
    where = "/".join(str(p) for p in first.absolute_path) or "(root)"
    return f"at {where}: {first.message[:300]}" + (
        f" (+{len(errors) - 1} more)" if errors[1:] else ""
    )


def _compile(schema: dict[str, Any], document: dict[str, Any]) -> Any:
    from jsonschema import Draft202012Validator

    # `#/components/...` references resolve against this root, which carries the components
    return Draft202012Validator({**schema, "components": document["components"]})
