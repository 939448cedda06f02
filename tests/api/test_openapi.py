"""GET /api/v1/openapi.json: valid OpenAPI 3.1 that lists exactly the routes the app serves."""

from __future__ import annotations

import re

import msgspec
from openapi_spec_validator import validate

from node.api import conformance
from node.api.openapi import registered_operations
from node.context import CONTEXT
from node.web.routes import PUBLIC
from tests.support import auth


async def fetch(client) -> dict:
    response = await client.get("/api/v1/openapi.json")
    assert response.status == 200
    assert response.content_type == "application/json"
    return await response.json()


def documented(doc: dict) -> dict[tuple[str, str], dict]:
    return {
        (method.upper(), path): operation
        for path, item in doc["paths"].items()
        for method, operation in item.items()
    }


async def test_document_is_public_and_valid_openapi_3_1(client):
    doc = await fetch(client)
    assert doc["openapi"] == "3.1.0"
    validate(doc)  # raises on any violation of the OpenAPI 3.1 schema
    assert doc["servers"] == [{"url": client.app[CONTEXT].config.public_url}]


async def test_document_lists_exactly_the_registered_routes_with_their_scopes(client):
    doc = await fetch(client)
    operations = documented(doc)
    routes = registered_operations(client.app)
    assert set(operations) == set(routes)
    for key, scopes in routes.items():
        operation = operations[key]
        if scopes == PUBLIC:
            assert operation["security"] == [], key
        else:
            assert operation["security"] == [{"bearer": []}], key
            assert operation["x-scopes"] == list(scopes), key
            assert "401" in operation["responses"] and "403" in operation["responses"]


async def test_every_route_is_documented_where_it_is_declared(client):
    """add_route takes the operation's Doc, so every route has a summary and a success or
    error response, and none is marked undocumented."""
    doc = await fetch(client)
    for key, operation in documented(doc).items():
        assert operation["summary"] and operation["tags"], key
        assert operation["responses"], key
        assert "x-undocumented" not in operation, key


async def test_a_response_that_does_not_match_the_document_is_caught(client, monkeypatch):
    """The suite's response check works: a handler answering outside its documented schema
    becomes a 500 that says why, and the mismatch is recorded."""
    from node.api import health

    monkeypatch.setattr(health, "Health", lambda status: {"status": 42})
    response = await client.get("/api/v1/health")
    assert response.status == 500
    assert "does not match the OpenAPI document" in (await response.json())["detail"]
    assert "GET /api/v1/health" in conformance.VIOLATIONS.pop()


async def test_path_parameters_match_the_route_placeholders(client):
    doc = await fetch(client)
    for (_method, path), operation in documented(doc).items():
        names = {p["name"] for p in operation.get("parameters", []) if p["in"] == "path"}
        assert names == set(re.findall(r"\{([^}]+)\}", path)), path


async def test_public_paths_are_the_designed_ones(client):
    doc = await fetch(client)
    public = sorted(
        f"{method} {path}" for (method, path), op in documented(doc).items() if op["security"] == []
    )
    assert public == [
        "GET /.well-known/agent-card.json",
        "GET /.well-known/agents.md",
        "GET /.well-known/did.json",
        "GET /a2a/{agent}/.well-known/agent-card.json",
        "GET /api/v1/health",
        "GET /api/v1/openapi.json",
        "GET /console/",
    ]


async def test_documented_schemas_match_what_the_api_returns(client):
    """The Task schema (generated from the projection's type) has the fields a read returns."""
    doc = await fetch(client)
    task_schema = doc["components"]["schemas"]["Task"]
    assert set(task_schema["required"]) <= set(task_schema["properties"])
    assert {"id", "from", "to", "status", "input", "output", "created_at", "completed_at"} <= set(
        task_schema["properties"]
    )
    grant = doc["components"]["schemas"]["Grant"]
    assert "revoked_at" not in grant["required"]
    problem = await client.get("/api/v1/a2a/tasks/x", headers=auth())
    body = await problem.json()
    assert set(body) >= set(doc["components"]["schemas"]["Problem"]["required"])
    assert msgspec.json.decode(msgspec.json.encode(doc)) == doc
