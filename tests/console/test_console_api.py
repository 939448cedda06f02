"""What the console needs from the node: its files (offline, locked down) and the read
endpoints it added (whoami, approval history, mesh overview)."""

from __future__ import annotations

import asyncio
import re

import pytest

from node.api.console import STATIC_DIR
from node.app import build_app
from node.context import CONTEXT
from node.services.approvals import APPROVALS
from tests.polling import until
from tests.support import (
    ADMIN_TOKEN,
    OPERATE_TOKEN,
    READ_TOKEN,
    auth,
    make_config,
    outcome,
    replicate,
)


@pytest.fixture
async def mesh_client(tmp_path, aiohttp_client):
    peer = '[[peers]]\nname = "node-b"\nurl = "http://127.0.0.1:9"\ntoken = "t"\n'
    peer += 'public_key = "z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"\n'
    return await aiohttp_client(build_app(make_config(tmp_path, peer)))


async def test_the_console_is_served_offline_with_a_strict_policy(client):
    page = await client.get("/console/")
    assert page.status == 200 and page.content_type == "text/html"
    html = await page.text()
    csp = page.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    # every file the page and its modules load is served by the node: nothing from elsewhere
    assert not re.search(r"(src|href)=\"(https?:)?//", html)
    for path in ["/console/style.css", "/console/js/app.js", "/console/js/views/inbox.js"]:
        response = await client.get(path)
        assert response.status == 200, path
        assert "Content-Security-Policy" in response.headers
    for module in STATIC_DIR.rglob("*.js"):
        for spec in re.findall(r'from "([^"]+)"', module.read_text()):
            assert spec.startswith("."), f"{module.name} imports {spec}"
    assert (await client.get("/console/../node/app.py")).status == 404
    assert (await client.get("/console/nope.js")).status == 404


async def test_whoami_names_the_token_and_its_scopes(client):
    me = await (await client.get("/api/v1/auth/whoami", headers=auth(READ_TOKEN))).json()
    assert me == {"name": "reader", "scopes": ["read"]}
    admin = await (await client.get("/api/v1/auth/whoami", headers=auth(ADMIN_TOKEN))).json()
    assert admin == {"name": "admin", "scopes": ["admin"]}
    wrong = await client.get("/api/v1/auth/whoami", headers=auth("wrong"))
    assert wrong.status == 401
    assert (await wrong.json())["detail"] == "the bearer token is not valid"
    # operate without read may not read, not even who it is: a console needs read to show data
    assert (await client.get("/api/v1/auth/whoami", headers=auth(OPERATE_TOKEN))).status == 403


async def test_history_lists_resolutions_newest_first_with_operator(client):
    gate = client.app[APPROVALS]
    waiting = [
        asyncio.create_task(outcome(gate.ask("payer", "spend", f"pay {i}", 60))) for i in range(3)
    ]
    await until(lambda: gate.projection.count >= 3, what="three requests are pending")
    first, second, third = [r.id for r in gate.projection.list()]
    await gate.decide(first, "approve", "alice")
    await gate.decide_batch([second, third], "deny", "bob")
    await asyncio.gather(*waiting)
    response = await client.get("/api/v1/approvals/history", headers=auth(READ_TOKEN))
    history = await response.json()
    assert [(r["id"], r["outcome"], r["operator"]) for r in history] == [
        (third, "deny", "bob"),
        (second, "deny", "bob"),
        (first, "approve", "alice"),
    ]
    assert all(r["agent"] == "payer" and r["at"].endswith("Z") for r in history)
    limited = await client.get("/api/v1/approvals/history?limit=1", headers=auth(READ_TOKEN))
    assert [r["id"] for r in await limited.json()] == [third]
    bad = await client.get("/api/v1/approvals/history?limit=-1", headers=auth(READ_TOKEN))
    assert bad.status == 400 and "limit" in (await bad.json())["detail"]


async def test_mesh_shows_peers_keys_journals_and_incidents(mesh_client):
    store = mesh_client.app[CONTEXT].store
    await store.append("payer", "log", {"level": "info", "message": "hello"})
    await replicate(store, "scout", "log", {"level": "info", "message": "from b"})
    await store.append(
        "node-a",
        "finding",
        {"severity": "high", "title": "equivocation", "detail": "x", "incident": "k1"},
    )
    response = await mesh_client.get("/api/v1/mesh", headers=auth(READ_TOKEN))
    assert response.status == 200
    mesh = await response.json()
    assert mesh["node"] == "node-a"
    assert mesh["peers"] == [
        {
            "name": "node-b",
            "url": "http://127.0.0.1:9",
            "public_key": "z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK",
            "key_source": "pinned",
        }
    ]
    journals = {j["agent"]: j for j in mesh["journals"]}
    assert set(journals) == {"payer", "scout", "node-a"}
    assert journals["payer"]["peers"] == [{"peer_id": "node-b", "acked_seq": 0, "lag": 1}]
    assert journals["scout"]["home"] == "node-b" and not journals["payer"]["converged"]
    assert [i["title"] for i in mesh["incidents"]] == ["equivocation"]
    assert (await mesh_client.get("/api/v1/mesh")).status == 401


def test_every_console_file_is_declared_package_data():
    """`pip install .` ships only what pyproject.toml declares: a file outside its globs would be
    missing from an installed node's console."""
    import tomllib

    from tests.support import ROOT

    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["node.console"]
    package = STATIC_DIR.parent
    files = [p for p in STATIC_DIR.rglob("*") if p.is_file()]
    assert files
    for path in files:
        relative = path.relative_to(package)
        assert any(relative.match(pattern) for pattern in globs), f"{relative} is not declared"
