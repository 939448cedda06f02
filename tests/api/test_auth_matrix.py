"""The auth matrix, generated from the route table (node/web/routes.py), so a route added later is
covered without touching this file: every protected route refuses no token and an unknown token
with 401 + WWW-Authenticate, and every token whose scopes miss the route's (and are not admin)
with 403; every PUBLIC route answers without a token."""

from __future__ import annotations

import re

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from node.api.openapi import route_path
from node.config.model import Config
from node.web.routes import PUBLIC, ROUTES
from tests.support import OPERATE_TOKEN, PUBLISH_TOKEN, READ_TOKEN, auth, make_config

SYNC_TOKEN = "test-sync-token-000000001"
# every scope but admin, one token each (tests.support has read, operate and publish)
SCOPED_TOKENS = {
    "read": READ_TOKEN,
    "operate": OPERATE_TOKEN,
    "publish": PUBLISH_TOKEN,
    "sync": SYNC_TOKEN,
}
UNKNOWN_TOKEN = "not-a-token-of-this-node-0001"
# plausible values for the path parameters the routes declare; anything else gets "x"
PATH_VALUES = {
    "agent": "hello",
    "task_id": "t-0001",
    "approval_id": "ap-0001",
    "package_id": "pkg-0001",
    "domain": "payments",
}
_PARAM = re.compile(r"\{([^}]+)\}")


@pytest.fixture
def config(tmp_path) -> Config:
    extra = f'\n[[auth.tokens]]\nname = "syncer"\ntoken = "{SYNC_TOKEN}"\nscopes = ["sync"]\n'
    return make_config(tmp_path, extra)


def concrete(path: str) -> str:
    return _PARAM.sub(lambda m: PATH_VALUES.get(m.group(1), "x"), path)


def route_table(app: web.Application) -> list[tuple[str, str, tuple[str, ...]]]:
    """(method, concrete path, scopes) of every route the app declares."""
    out = []
    for route, entry in app[ROUTES].items():
        path = route_path(route)
        assert path is not None, route
        out.append((route.method, concrete(path), entry.scopes))
    return sorted(out)


async def test_every_route_answers_each_caller_as_its_scopes_say(client: TestClient):
    """No token and unknown token: 401 with a challenge; a token without any of the route's
    scopes: 403; public routes: never 401/403 without a token."""
    routes = route_table(client.app)
    assert len(routes) >= 30, routes  # the table is read, not empty
    wrong: list[str] = []
    cases = 0
    for method, path, scopes in routes:
        if scopes == PUBLIC:
            response = await client.request(method, path)
            cases += 1
            if response.status in (401, 403):
                wrong.append(f"{method} {path} (public): {response.status}")
            continue
        for label, headers in (("no token", {}), ("unknown token", auth(UNKNOWN_TOKEN))):
            response = await client.request(method, path, headers=headers)
            cases += 1
            challenge = response.headers.get("WWW-Authenticate", "")
            if response.status != 401 or not challenge.startswith("Bearer"):
                wrong.append(f"{method} {path} {label}: {response.status} {challenge!r}")
        for scope, token in SCOPED_TOKENS.items():
            if scope in scopes:
                continue
            response = await client.request(method, path, headers=auth(token))
            cases += 1
            if response.status != 403:
                wrong.append(f"{method} {path} with {scope} (needs {scopes}): {response.status}")
            elif response.content_type != "application/problem+json":
                wrong.append(f"{method} {path} with {scope}: 403 as {response.content_type}")
    assert wrong == [], "\n".join(wrong)
    print(f"auth matrix: {len(routes)} routes, {cases} cases")


async def test_the_matrix_sees_every_scope_and_public_routes(client: TestClient):
    """The matrix is not vacuous: the table has public routes and routes of every scope."""
    scopes = {s for _, _, route_scopes in route_table(client.app) for s in route_scopes}
    assert set(SCOPED_TOKENS) <= scopes
    assert any(s == PUBLIC for _, _, s in route_table(client.app))


async def test_unknown_api_paths_need_a_token_before_they_are_404(client: TestClient):
    response = await client.get("/api/v1/no-such-thing")
    assert response.status == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    response = await client.get("/api/v1/no-such-thing", headers=auth(READ_TOKEN))
    assert response.status == 404
