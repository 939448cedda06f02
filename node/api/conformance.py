"""A check that every response matches the node's own OpenAPI document (status, content type
and body schema), for test suites and staging: set AGENT_NODE_CHECK_RESPONSES=1.

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
VIOLATIONS: list[str] = []  # every mismatch of this process, for a test suite to assert on
_VALIDATORS: web.AppKey[dict[tuple[str, str, int, str], Any]] = web.AppKey("validators", dict)


def install(app: web.Application) -> None:
    """Check every response of `app` when the environment asks for it."""
    if os.environ.get(ENV, "") not in ("", "0"):
        app[_VALIDATORS] = {}
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
    problem = violation(request, response)
    if problem is None:
        return response
    message = f"{request.method} {request.path} → {response.status}: {problem}"
    VIOLATIONS.append(message)
    log.error("response does not match the OpenAPI document: %s", message)
    return problem_response(500, f"the response does not match the OpenAPI document: {problem}")


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
