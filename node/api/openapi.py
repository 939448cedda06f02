"""GET /api/v1/openapi.json: an OpenAPI 3.1 document generated from the route table.

Which paths and methods exist and who may call them come from the router; what each operation
takes and returns comes from the `Doc` it was added with (node.web.routes), its schemas generated
from the msgspec types named there. So the document cannot list a route that does not exist,
miss one that does, or describe a body other than the one the code decodes.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
from aiohttp import web

from node.context import CONTEXT
from node.ops.version import __version__
from node.web.http import json_response
from node.web.routes import PUBLIC, ROUTES, Doc, Scopes, add_route

OPENAPI_PATH = "/api/v1/openapi.json"
# filled on the first request: the router is frozen by then
DOCUMENT: web.AppKey[dict[str, Any]] = web.AppKey("openapi_document", dict)
_PARAM = re.compile(r"\{([^}:]+)(?::[^}]*)?\}")
_REF = "#/components/schemas/{name}"
PROBLEM_SCHEMA = {
    "type": "object",
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
    },
    "required": ["type", "title", "status", "detail"],
    "description": "RFC 9457 problem details; `detail` says what was wrong.",
}
_ERRORS = {
    400: "Malformed JSON, a wrong type, a missing field or a bad query value",
    401: "No bearer token, or one this node does not know",
    403: "The token lacks the scope for this call",
    404: "Not found",
    405: "Method not allowed",
    408: (
        "The request body did not arrive within `node.body_timeout_secs` (an upload: with no "
        "pause that long, and whole within `node.upload_timeout_secs`)"
    ),
    409: "Conflict",
    413: "Too large",
    415: "Wrong content type",
    422: (
        "Understood but not carried out: a component past its compile limits, an upgrade "
        "rolled back (`detail` says why)"
    ),
    429: "A limit of this node is reached (`detail` names it): retry after `Retry-After` seconds",
    500: "The node failed to handle the request (its log says why; the body reveals nothing)",
    503: (
        "Not available now: shutting down, the runtime is not running, or the node is full of "
        "connections (a slot kept for the health check and admin tokens serves nothing else)"
    ),
}


def route_path(route: web.AbstractRoute) -> str | None:
    info = route.resource.get_info() if route.resource is not None else {}
    path = info.get("path") or info.get("formatter")
    return _PARAM.sub(r"{\1}", path) if path else None


def registered_operations(app: web.Application) -> dict[tuple[str, str], Scopes]:
    """(method, OpenAPI path) → scopes of every route of the app (HEAD and * excluded)."""
    routes = app[ROUTES]
    out = {}
    for route in app.router.routes():
        path = route_path(route)
        if path is None or route.method in ("HEAD", "*"):
            continue
        entry = routes.get(route)
        out[(route.method, path)] = entry.scopes if entry else ("admin",)
    return out


class _Schemas:
    """Collects the types the docs name, then generates their schemas in one pass (shared
    Structs become one component each, referenced where they are used)."""

    def __init__(self) -> None:
        self._types: list[Any] = []
        self._slots: list[tuple[dict[str, Any], str]] = []

    def use(self, target: dict[str, Any], key: str, kind: Any) -> None:
        """Set target[key] to the schema of `kind`: a JSON schema (dict) as is, else a type."""
        if isinstance(kind, dict):
            target[key] = kind
            return
        self._slots.append((target, key))
        self._types.append(kind)

    def components(self) -> dict[str, Any]:
        schemas, components = msgspec.json.schema_components(self._types, ref_template=_REF)
        for (target, key), schema in zip(self._slots, schemas, strict=True):
            target[key] = schema
        return {"Problem": PROBLEM_SCHEMA, **components}


def _content(schemas: _Schemas, media: dict[str, Any]) -> dict[str, Any]:
    content: dict[str, Any] = {}
    for media_type, kind in media.items():
        content[media_type] = {}
        schemas.use(content[media_type], "schema", kind)
    return content


def _operation(doc: Doc, schemas: _Schemas) -> dict[str, Any]:
    responses: dict[str, Any] = {}
    if doc.returns is not None or doc.content is not None:
        media = {"application/json": doc.returns} if doc.returns is not None else doc.content
        responses[str(doc.status)] = {
            "description": doc.summary,
            "content": _content(schemas, media or {}),
        }
    for status, media in doc.extra.items():
        responses[str(status)] = {"description": doc.summary}
        if media is not None:
            responses[str(status)]["content"] = _content(schemas, media)
    errors = set(doc.errors)
    if doc.body is not None or doc.body_content is not None:
        errors |= {400, 413}  # any body can be malformed or larger than node.max_body_kb
    errors |= {500, 503}  # 503: on a connection slot kept for operators (node/web/connections)
    for code in sorted(errors):
        responses.setdefault(str(code), {"$ref": f"#/components/responses/E{code}"})
    operation: dict[str, Any] = {"summary": doc.summary, "tags": [doc.tag]}
    if doc.description:
        operation["description"] = doc.description
    if doc.query:
        operation["parameters"] = []
        for q in doc.query:
            param = {"name": q.name, "in": "query", "required": q.required}
            param["description"] = q.description
            schemas.use(param, "schema", q.schema)
            operation["parameters"].append(param)
    if doc.body is not None or doc.body_content is not None:
        media = {"application/json": doc.body} if doc.body is not None else doc.body_content
        operation["requestBody"] = {"required": True, "content": _content(schemas, media or {})}
    operation["responses"] = responses
    return operation


def build_document(app: web.Application) -> dict[str, Any]:
    ctx = app[CONTEXT]
    routes = app[ROUTES]
    schemas = _Schemas()
    paths: dict[str, dict[str, Any]] = {}
    by_path = sorted(
        ((route.method, route_path(route), entry) for route, entry in routes.items()),
        key=lambda item: (item[1] or "", item[0]),
    )
    for method, path, entry in by_path:
        if path is None:
            continue
        operation = _operation(entry.doc, schemas)
        if method in ("POST", "PUT", "PATCH"):  # a body too slow (node/web/body.py)
            operation["responses"].setdefault("408", {"$ref": "#/components/responses/E408"})
        names = [m.group(1) for m in _PARAM.finditer(path)]
        if names:
            operation["parameters"] = [
                {"name": n, "in": "path", "required": True, "schema": {"type": "string"}}
                for n in names
            ] + operation.get("parameters", [])
        operation["operationId"] = _operation_id(method, path)
        if entry.scopes == PUBLIC:
            operation["security"] = []
        else:
            operation["security"] = [{"bearer": []}]
            operation["x-scopes"] = list(entry.scopes)
            operation["responses"]["401"] = {"$ref": "#/components/responses/E401"}
            operation["responses"]["403"] = {"$ref": "#/components/responses/E403"}
            # too many requests of this token in flight (node/web/inflight.py)
            operation["responses"].setdefault("429", {"$ref": "#/components/responses/E429"})
        paths.setdefault(path, {})[method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {
            "title": f"Agent runtime node {ctx.name}",
            "version": __version__,
            "description": "HTTP API of an agent runtime node. Every /api/v1 path needs a "
            "bearer token except the health check and this document; `x-scopes` names the "
            "token scopes that may call an operation (`admin` may call all).",
        },
        "servers": [{"url": ctx.config.public_url}],
        "paths": paths,
        "components": {
            "schemas": schemas.components(),
            "responses": {
                f"E{code}": {
                    "description": text,
                    "content": {"application/problem+json": {"schema": {"$ref": _ref("Problem")}}},
                }
                for code, text in _ERRORS.items()
            },
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _ref(name: str) -> str:
    return _REF.format(name=name)


def _operation_id(method: str, path: str) -> str:
    words = re.findall(r"[A-Za-z0-9]+", _PARAM.sub(r"by_\1", path.removeprefix("/api/v1")))
    return "_".join([method.lower(), *words])


def document_of(app: web.Application) -> dict[str, Any]:
    cache = app[DOCUMENT]
    if not cache:
        cache.update(build_document(app))
    return cache


async def openapi_document(request: web.Request) -> web.Response:
    return json_response(document_of(request.app))


def setup(app: web.Application) -> None:
    app[DOCUMENT] = {}
    add_route(
        app,
        "GET",
        OPENAPI_PATH,
        openapi_document,
        PUBLIC,
        Doc("This document", "discovery", content={"application/json": {"type": "object"}}),
    )
