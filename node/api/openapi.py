"""GET /api/v1/openapi.json: an OpenAPI 3.1 document generated from the registered routes.

Which paths and methods exist, and who may call them, come from the router and the route
scopes, so the document cannot list a route that does not exist or miss one that does. What
each operation takes and returns comes from `CATALOG` (keyed by method and path shape), with
schemas generated from the msgspec types the handlers decode and encode where there are some.
A route without a catalog entry still appears, marked `x-undocumented`; a test fails on it.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
from aiohttp import web

from node.api.a2a import NewTask
from node.api.approvals import BatchBody, DecisionBody
from node.api.params import MAX_LIMIT, json_response
from node.auth import PUBLIC, ROUTE_SCOPES, add_route
from node.context import CONTEXT
from node.services.findings import NewFinding
from node.version import __version__
from projections.approvals import ApprovalRequest, Group, Resolution
from projections.entries import Finding, LogEntry
from projections.grants import Grant
from projections.registry import PACKAGE_ID, Package
from projections.tasks import STATUSES, Task

OPENAPI_PATH = "/api/v1/openapi.json"
# filled on the first request: the router is frozen by then
DOCUMENT: web.AppKey[dict[str, Any]] = web.AppKey("openapi_document", dict)
_PARAM = re.compile(r"\{([^}:]+)(?::[^}]*)?\}")
_REF = "#/components/schemas/{name}"

# ---------------------------------------------------------------------------- schemas
_STRUCTS = (
    ApprovalRequest,
    Group,
    Resolution,
    DecisionBody,
    BatchBody,
    Task,
    NewTask,
    Package,
    Grant,
    LogEntry,
    Finding,
    NewFinding,
)
_, _GENERATED = msgspec.json.schema_components(_STRUCTS, ref_template=_REF)


def ref(name: str) -> dict[str, str]:
    return {"$ref": _REF.format(name=name)}


def obj(properties: dict[str, Any], required: list[str] | None = None, **extra: Any) -> dict:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties) if required is None else required,
        **extra,
    }


def array(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


S = {"type": "string"}
I = {"type": "integer"}  # noqa: E741
TS = {"type": "string", "format": "date-time"}

SCHEMAS: dict[str, Any] = {
    **_GENERATED,
    "Problem": obj(
        {"type": S, "title": S, "status": I, "detail": S},
        description="RFC 9457 problem details; `detail` says what was wrong.",
    ),
    "Batched": obj({"groups": array(ref("Group"))}),
    "DecisionResult": obj(
        {
            "id": S,
            "decision": {"type": "string", "enum": ["approve", "deny"]},
            "decided_at": TS,
            "operator": S,
        },
        ["id", "decision", "decided_at"],
    ),
    "BatchResult": obj(
        {"decided": I, "ids": array(S), "skipped": array(S)},
        description="`ids` were decided; `skipped` were unknown, already resolved or hosted "
        "on another node.",
    ),
    "TaskCreated": obj(
        {"id": S, "status": {"type": "string", "const": "pending"}, "created_at": TS}
    ),
    "PublishResult": obj({"id": S, "version": S, "checksum": S, "published_at": TS}),
    "PublishForm": obj(
        {
            "id": {"type": "string", "pattern": PACKAGE_ID},
            "version": {"type": "string", "description": "strict SemVer 2.0"},
            "description": S,
            "wasm": {
                "type": "string",
                "contentMediaType": "application/wasm",
                "description": "a compiled WebAssembly component",
            },
        },
        ["id", "version", "wasm"],
    ),
    "GrantChange": obj(
        {"agent": S, "domain": S, "status": {"type": "string", "enum": ["active", "revoked"]}}
    ),
    "LogPage": obj({"next_seq": I, "logs": array(ref("LogEntry"))}),
    "FindingPage": obj({"next_seq": I, "findings": array(ref("Finding"))}),
    "FindingCreated": obj({"seq": I}),
    "Health": obj({"status": {"type": "string", "enum": ["ok", "shutting_down"]}}),
    "Convergence": obj(
        {
            "agent": S,
            "local_seq": I,
            "peers": array(obj({"peer_id": S, "acked_seq": I, "lag": I})),
            "converged": {"type": "boolean"},
            "home": {"type": ["string", "null"], "description": "node that writes this journal"},
        }
    ),
    "Mesh": obj(
        {
            "node": S,
            "peers": array(
                obj(
                    {
                        "name": S,
                        "url": S,
                        "public_key": {"type": ["string", "null"]},
                        "key_source": {
                            "type": ["string", "null"],
                            "enum": ["pinned", "config", None],
                        },
                    }
                )
            ),
            "journals": array(ref("Convergence")),
            "incidents": array(ref("Finding")),
        }
    ),
    "EnvelopeRead": obj(
        {
            "seq": I,
            "agent": S,
            "payload_hash": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"},
            "timestamp": TS,
            "signature": {"type": "string", "pattern": "^ed25519:"},
        }
    ),
    "EnvelopePushed": obj(
        {
            "seq": I,
            "agent": S,
            "payload": {"type": "string", "contentEncoding": "base64"},
            "signature": {"type": "string", "pattern": "^ed25519:"},
        }
    ),
    "EnvelopePage": obj({"envelopes": array(ref("EnvelopeRead"))}),
    "Push": obj({"peer_id": S, "envelopes": array(ref("EnvelopePushed"))}),
    "PushResult": obj(
        {
            "accepted": I,
            "rejected": I,
            "heads": {"type": "object", "additionalProperties": I},
            "rejections": array(
                obj({"index": I, "agent": S, "seq": I, "reason": S, "detail": S}),
            ),
        },
        ["accepted", "rejected"],
    ),
    "AgentStatus": obj(
        {
            "name": S,
            "status": {"type": "string", "enum": ["running", "idle", "stopped", "error"]},
            "uptime_ms": I,
            "last_activity_ms_ago": I,
            "restart_count": I,
            "memory_profile": obj(
                {"heap_bytes": I, "fuel_remaining": {"type": ["integer", "null"]}}
            ),
        }
    ),
    "JsonRpcRequest": obj(
        {
            "jsonrpc": {"type": "string", "const": "2.0"},
            "id": {"type": ["string", "integer", "null"]},
            "method": S,
            "params": {"type": "object"},
        },
        ["jsonrpc", "method"],
    ),
    "JsonRpcResponse": obj(
        {
            "jsonrpc": {"type": "string", "const": "2.0"},
            "id": {"type": ["string", "integer", "null"]},
            "result": {},
            "error": obj({"code": I, "message": S, "data": {}}, ["code", "message"]),
        },
        ["jsonrpc", "id"],
    ),
    "AgentCard": obj(
        {
            "name": S,
            "description": S,
            "url": S,
            "version": S,
            "capabilities": obj(
                {"streaming": {"type": "boolean"}, "pushNotifications": {"type": "boolean"}}
            ),
            "defaultInputModes": array(S),
            "defaultOutputModes": array(S),
            "skills": array(
                obj({"id": S, "name": S, "description": S, "tags": array(S)}, ["id", "name"])
            ),
        },
        ["name", "url", "version", "capabilities", "skills"],
    ),
    "DidDocument": obj(
        {
            "@context": S,
            "id": S,
            "verificationMethod": array(
                obj(
                    {
                        "id": S,
                        "type": {"type": "string", "const": "Ed25519VerificationKey2020"},
                        "controller": S,
                        "publicKeyMultibase": S,
                    }
                )
            ),
            "authentication": array(S),
            "assertionMethod": array(S),
        },
        ["@context", "id", "verificationMethod", "authentication"],
    ),
}

# ---------------------------------------------------------------------------- operations
_ERRORS = {
    400: "Malformed JSON, a wrong type, a missing field or a bad query value",
    401: "No bearer token, or one this node does not know",
    403: "The token lacks the scope for this call",
    404: "Not found",
    409: "Conflict",
    413: "Too large",
    415: "Wrong content type",
}


def json_content(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def sse(events: str) -> dict[str, Any]:
    return {
        "200": {
            "description": f"Server-Sent Events: {events}",
            "content": {"text/event-stream": {"schema": S}},
        }
    }


def query(name: str, schema: dict[str, Any], description: str, required: bool = False) -> dict:
    return {
        "name": name,
        "in": "query",
        "required": required,
        "schema": schema,
        "description": description,
    }


SINCE = query("since", {"type": "integer", "minimum": 0, "default": 0}, "entries after this seq")


def limit(default: int) -> dict[str, Any]:
    return query(
        "limit",
        {"type": "integer", "minimum": 0, "default": default},
        f"maximum entries (clamped to {MAX_LIMIT})",
    )


def op(
    summary: str,
    tag: str,
    ok: dict[str, Any],
    *,
    errors: tuple[int, ...] = (),
    query_params: tuple[dict[str, Any], ...] = (),
    body: dict[str, Any] | None = None,
    status: int = 200,
    description: str | None = None,
) -> dict[str, Any]:
    """One operation; `ok` is the success response (a `content` map, or full responses)."""
    if all(key.isdigit() for key in ok):
        responses = dict(ok)
    else:
        responses = {str(status): {"description": summary, "content": ok}}
    for code in errors:
        responses[str(code)] = {"$ref": f"#/components/responses/E{code}"}
    operation: dict[str, Any] = {"summary": summary, "tags": [tag], "responses": responses}
    if description:
        operation["description"] = description
    if query_params:
        operation["parameters"] = list(query_params)
    if body is not None:
        operation["requestBody"] = {"required": True, "content": body}
    return operation


CATALOG: dict[tuple[str, str], dict[str, Any]] = {
    ("GET", "/api/v1/health"): op("Liveness", "health", json_content(ref("Health"))),
    ("GET", "/api/v1/metrics"): op(
        "Metrics in the Prometheus text format",
        "health",
        {"text/plain": {"schema": S}},
    ),
    ("GET", OPENAPI_PATH): op("This document", "discovery", json_content({"type": "object"})),
    ("GET", "/api/v1/approvals"): op(
        "Pending approval requests, oldest first",
        "approvals",
        json_content(array(ref("ApprovalRequest"))),
    ),
    ("GET", "/api/v1/approvals/batched"): op(
        "Pending approval requests grouped by agent and capability",
        "approvals",
        json_content(ref("Batched")),
    ),
    ("POST", "/api/v1/approvals/batch"): op(
        "Decide many approvals at once",
        "approvals",
        json_content(ref("BatchResult")),
        errors=(400,),
        body=json_content(ref("BatchBody")),
        description="Pending ids are decided in one atomic append; the others are skipped.",
    ),
    ("POST", "/api/v1/approvals/{}"): op(
        "Decide one approval",
        "approvals",
        json_content(ref("DecisionResult")),
        errors=(400, 404, 409),
        body=json_content(ref("DecisionBody")),
        description="404 when the id is unknown, decided or timed out; 409 (with `home_node`) "
        "when the agent is hosted on another node.",
    ),
    ("GET", "/api/v1/a2a/tasks"): op(
        "A2A tasks, oldest first",
        "a2a",
        json_content(array(ref("Task"))),
        errors=(400,),
        query_params=(
            query("status", {"type": "string", "enum": list(STATUSES)}, "only this status"),
            query("agent", S, "only tasks assigned to this agent"),
        ),
    ),
    ("POST", "/api/v1/a2a/tasks"): op(
        "Create a task for a hosted agent",
        "a2a",
        json_content(ref("TaskCreated")),
        status=201,
        errors=(400, 404, 409),
        body=json_content(ref("NewTask")),
    ),
    ("GET", "/api/v1/a2a/tasks/{}"): op(
        "One A2A task", "a2a", json_content(ref("Task")), errors=(404,)
    ),
    ("GET", "/api/v1/a2a/events"): op(
        "Task lifecycle stream",
        "a2a",
        sse("task_created, task_started, task_progress, task_completed, task_failed"),
    ),
    ("GET", "/api/v1/logs"): op(
        "Log entries after a seq",
        "logs",
        json_content(ref("LogPage")),
        errors=(400,),
        query_params=(SINCE, limit(100)),
    ),
    ("GET", "/api/v1/findings"): op(
        "Findings after a seq",
        "logs",
        json_content(ref("FindingPage")),
        errors=(400,),
        query_params=(SINCE, limit(50)),
    ),
    ("POST", "/api/v1/findings"): op(
        "Report a finding",
        "logs",
        json_content(ref("FindingCreated")),
        status=201,
        errors=(400, 409),
        body=json_content(ref("NewFinding")),
    ),
    ("GET", "/api/v1/sync/convergence"): op(
        "Replication state of one journal",
        "sync",
        json_content(ref("Convergence")),
        errors=(400,),
        query_params=(query("agent", S, "journal (agent) name", required=True),),
    ),
    ("GET", "/api/v1/sync/envelopes"): op(
        "Envelopes of one journal after a seq",
        "sync",
        json_content(ref("EnvelopePage")),
        errors=(400,),
        query_params=(
            query("agent", S, "journal (agent) name", required=True),
            SINCE,
            limit(100),
        ),
    ),
    ("POST", "/api/v1/sync/envelopes"): op(
        "Push envelopes from a peer",
        "sync",
        json_content(ref("PushResult")),
        errors=(400, 403, 413),
        body=json_content(ref("Push")),
    ),
    ("GET", "/api/v1/registry/packages"): op(
        "Packages (latest version of each)",
        "registry",
        json_content(array(ref("Package"))),
    ),
    ("POST", "/api/v1/registry/packages"): op(
        "Publish a package version",
        "registry",
        json_content(ref("PublishResult")),
        status=201,
        errors=(400, 409, 413, 415),
        body={
            "multipart/form-data": {
                "schema": ref("PublishForm"),
                "encoding": {"wasm": {"contentType": "application/wasm"}},
            }
        },
    ),
    ("GET", "/api/v1/registry/packages/{}"): op(
        "One package with all its versions",
        "registry",
        json_content(ref("Package")),
        errors=(404,),
    ),
    ("GET", "/.well-known/agent-card.json"): op(
        "A2A agent card", "discovery", json_content(ref("AgentCard"))
    ),
    ("GET", "/.well-known/did.json"): op(
        "DID document (did:web)", "discovery", json_content(ref("DidDocument"))
    ),
    ("GET", "/.well-known/agents.md"): op(
        "Markdown summary of the node", "discovery", {"text/markdown": {"schema": S}}
    ),
    ("GET", "/api/v1/broker/grants"): op(
        "Secrets-broker grants", "grants", json_content(array(ref("Grant")))
    ),
    ("POST", "/api/v1/broker/grants/{}/{}/revoke"): op(
        "Revoke an active grant",
        "grants",
        json_content(ref("GrantChange")),
        errors=(404, 409),
    ),
    ("POST", "/api/v1/broker/grants/{}/{}/restore"): op(
        "Restore a revoked grant",
        "grants",
        json_content(ref("GrantChange")),
        errors=(404, 409),
    ),
    ("GET", "/api/v1/status"): op(
        "Status of the hosted agents",
        "agents",
        json_content(array(ref("AgentStatus"))),
        query_params=(query("agent", S, "only this agent"),),
    ),
    ("POST", "/api/v1/mcp/{}"): op(
        "MCP JSON-RPC 2.0 endpoint of an agent",
        "agents",
        json_content(ref("JsonRpcResponse")),
        errors=(404,),
        body=json_content(ref("JsonRpcRequest")),
        description="202 without a body for a notification.",
    ),
    ("GET", "/api/v1/mcp/{}"): op(
        "Not supported (streams are not offered)",
        "agents",
        {"405": {"description": "Method not allowed"}},
    ),
    ("GET", "/api/v1/events"): op(
        "All agents' runtime events",
        "streams",
        sse("token, tool_call_start, tool_call_end, agent_complete, error, keepalive"),
    ),
    ("GET", "/api/v1/agents/stream"): op(
        "One agent's runtime events",
        "streams",
        sse("as /api/v1/events, for one agent"),
        errors=(400,),
    ),
    ("GET", "/api/v1/agui/events"): op(
        "AG-UI event stream", "streams", sse("the AG-UI lifecycle events")
    ),
    ("GET", "/api/v1/auth/whoami"): op(
        "The calling token's name and scopes",
        "auth",
        json_content(obj({"name": S, "scopes": array(S)})),
        description="Lets a client (the console) hide actions its token may not take.",
    ),
    ("GET", "/api/v1/approvals/history"): op(
        "Resolved approval requests, newest first",
        "approvals",
        json_content(array(ref("Resolution"))),
        errors=(400,),
        query_params=(limit(100),),
        description="`outcome` is approve, deny or timeout; `operator` is who decided.",
    ),
    ("GET", "/api/v1/mesh"): op(
        "Peers, their keys, replication per journal and recent sync incidents",
        "sync",
        json_content(ref("Mesh")),
    ),
    ("GET", "/console/"): op(
        "The operator console (HTML; its data calls need a token)",
        "console",
        {"text/html": {"schema": S}},
    ),
}


def shape(method: str, path: str) -> tuple[str, str]:
    """The catalog key of a route: its method and its path with parameters as `{}`."""
    return method, _PARAM.sub("{}", path)


def route_path(route: web.AbstractRoute) -> str | None:
    info = route.resource.get_info() if route.resource is not None else {}
    path = info.get("path") or info.get("formatter")
    return _PARAM.sub(r"{\1}", path) if path else None


def registered_operations(app: web.Application) -> dict[tuple[str, str], tuple[str, ...]]:
    """(method, OpenAPI path) → scopes of every route of the app (HEAD and * excluded)."""
    scopes = app[ROUTE_SCOPES]
    out = {}
    for route in app.router.routes():
        path = route_path(route)
        if path is None or route.method in ("HEAD", "*"):
            continue
        out[(route.method, path)] = scopes.get(route, ("admin",))
    return out


def build_document(app: web.Application) -> dict[str, Any]:
    ctx = app[CONTEXT]
    paths: dict[str, dict[str, Any]] = {}
    operations = registered_operations(app).items()
    for (method, path), scopes in sorted(operations, key=lambda item: item[0][::-1]):
        entry = CATALOG.get(shape(method, path))
        operation = (
            dict(entry)
            if entry
            else {
                "summary": f"{method} {path}",
                "x-undocumented": True,
                "responses": {"200": {"description": "OK"}},
            }
        )
        names = [m.group(1) for m in _PARAM.finditer(path)]
        if names:
            operation["parameters"] = [
                {"name": n, "in": "path", "required": True, "schema": S} for n in names
            ] + operation.get("parameters", [])
        operation["operationId"] = _operation_id(method, path)
        if scopes == PUBLIC:
            operation["security"] = []
        else:
            operation["security"] = [{"bearer": []}]
            operation["x-scopes"] = list(scopes)
            operation["responses"] = {
                **operation["responses"],
                "401": {"$ref": "#/components/responses/E401"},
                "403": {"$ref": "#/components/responses/E403"},
            }
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
            "schemas": SCHEMAS,
            "responses": {
                f"E{code}": {
                    "description": text,
                    "content": {"application/problem+json": {"schema": ref("Problem")}},
                }
                for code, text in _ERRORS.items()
            },
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _operation_id(method: str, path: str) -> str:
    words = re.findall(r"[A-Za-z0-9]+", _PARAM.sub(r"by_\1", path.removeprefix("/api/v1")))
    return "_".join([method.lower(), *words])


async def openapi_document(request: web.Request) -> web.Response:
    cache = request.app[DOCUMENT]
    if not cache:
        cache.update(build_document(request.app))
    return json_response(cache)


def setup(app: web.Application) -> None:
    app[DOCUMENT] = {}
    add_route(app, "GET", OPENAPI_PATH, openapi_document, PUBLIC)
