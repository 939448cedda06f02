"""PUT /api/v1/agents/{name} replaces the whole definition; PATCH merges (RFC 7396) into what
runs. Real components published to the node's real registry, over HTTP (issue 37 item 7)."""

from __future__ import annotations

import json

import pytest

from node.app import build_app
from node.runtime.compiled_cache import COMPILED_CACHE_ENV
from node.services.mergepatch import merge_patch
from tests.runtime.test_lifecycle import publish, put
from tests.runtime_support import COMPILED_CACHE
from tests.support import ADMIN_TOKEN, OPERATE_TOKEN, auth, make_config

MERGE = "application/merge-patch+json"


@pytest.fixture(autouse=True)
def shared_compiled_cache(monkeypatch):
    monkeypatch.setenv(COMPILED_CACHE_ENV, str(COMPILED_CACHE))


async def patch(client, name: str, body, token: str = ADMIN_TOKEN, media: str = MERGE):
    data = body if isinstance(body, str) else json.dumps(body)
    headers = {**auth(token), "Content-Type": media}
    return await client.patch(f"/api/v1/agents/{name}", data=data, headers=headers)


async def definition(response) -> dict:
    assert response.status in (200, 201), await response.text()
    return (await response.json())["agent"]["definition"]


async def test_patch_changes_only_what_it_names_and_put_replaces_everything(
    aiohttp_client, tmp_path, built_agents
):
    client = await aiohttp_client(build_app(make_config(tmp_path)))
    await publish(client, "hello", "1.0.0", built_agents["hello"])
    await publish(client, "hello", "1.1.0", built_agents["hello"])
    first = {
        "component": "registry:hello@1.0.0",
        "description": "says hello",
        "tick_interval_ms": 300,
        "capabilities": {"spend": True, "notify": True},
        "approval": {"spend": True, "timeout_secs": 60},
        "allow_hosts": ["example.org"],
    }
    assert (await put(client, "a", first)).status == 201

    # a new version: everything else stays as it was
    upgraded = await patch(client, "a", {"component": "registry:hello@1.1.0"})
    answer = await upgraded.json()
    assert upgraded.status == 200 and "revision 2" in answer["message"], answer
    kept = answer["agent"]["definition"]
    assert kept["component"] == "registry:hello@1.1.0"
    assert kept["description"] == "says hello"
    assert kept["limits"]["tick_interval_ms"] == 300
    assert kept["capabilities"] == {"spend": True, "notify": True}
    assert kept["approval"] == {"spend": True, "timeout_secs": 60}
    assert kept["allow_hosts"] == ["example.org"]

    # objects merge key by key, null removes (the default applies), a list is replaced whole
    changes = {
        "capabilities": {"notify": None},
        "approval": {"timeout_secs": None},
        "description": None,
        "allow_hosts": ["example.net"],
    }
    merged = await definition(await patch(client, "a", changes, media="application/json"))
    assert merged["capabilities"] == {"spend": True}
    assert merged["approval"] == {"spend": True}
    assert merged["description"] == ""
    assert merged["allow_hosts"] == ["example.net"]
    assert merged["limits"]["tick_interval_ms"] == 300

    # the same patch again: nothing changes
    same = await patch(client, "a", changes)
    assert same.status == 200 and "nothing changed" in (await same.json())["message"]
    # the placement set (docs/api.md): this node alone is the set it has; null keeps it
    for placement in (["node-a"], None):
        kept = await patch(client, "a", {"placement": placement})
        assert kept.status == 200, await kept.text()
        assert "nothing changed" in (await kept.json())["message"]

    # PUT is the whole definition: what it leaves out takes its default
    replaced = await definition(await put(client, "a", {"component": "registry:hello@1.1.0"}))
    assert replaced["capabilities"] == {} and replaced["approval"] == {}
    assert replaced["limits"]["tick_interval_ms"] == 1000
    assert replaced["allow_hosts"] == []


BAD_PATCHES = [
    ({"tick_interval_ms": "fast"}, 400, "tick_interval_ms"),
    ({"tick_interval_ms": 0}, 400, "tick_interval_ms"),
    ({"colour": "red"}, 400, "colour"),
    ("[1, 2]", 400, "invalid body"),
    ("{not json", 400, ""),
    ("", 400, "needs a JSON body"),
    ({"capabilities": {"spend": None}}, 400, "approval.spend"),  # would gate what it lacks
    ({"placement": "node-a"}, 400, "placement"),
    ({"placement": ["node-b"]}, 422, "placement: must include this node ('node-a')"),
    ({"placement": ["node-a", "node-b"]}, 422, "more than one node needs [mesh] transport"),
    ({"component": "registry:hello@9.9.9"}, 404, "9.9.9"),
]


async def test_a_bad_patch_is_a_problem_and_changes_nothing(aiohttp_client, tmp_path, built_agents):
    client = await aiohttp_client(build_app(make_config(tmp_path)))
    await publish(client, "hello", "1.0.0", built_agents["hello"])
    gated = {
        "component": "registry:hello@1.0.0",
        "capabilities": {"spend": True},
        "approval": {"spend": True},
    }
    assert (await put(client, "a", gated)).status == 201
    for body, status, says in BAD_PATCHES:
        response = await patch(client, "a", body)
        assert response.status == status, (body, await response.text())
        assert response.content_type == "application/problem+json"
        assert says in (await response.json())["detail"], body
    # 50,000 bad keys: the answer names ten and counts the rest (it was 5.6 MB)
    many = await patch(client, "a", {"approval": {f"k{i:05d}": True for i in range(50_000)}})
    assert many.status == 400 and len(await many.read()) < 4096
    detail = (await many.json())["detail"]
    assert "approval.k00000: gates a capability" in detail and detail.endswith("; and 49990 more")
    shown = await client.get("/api/v1/agents/a", headers=auth(ADMIN_TOKEN))
    agent = await shown.json()
    assert agent["current"]["revision"] == 1
    assert agent["definition"]["capabilities"] == {"spend": True}


async def test_patch_needs_a_deployed_agent_and_the_admin_scope(aiohttp_client, tmp_path):
    client = await aiohttp_client(build_app(make_config(tmp_path)))
    missing = await patch(client, "nobody", {"description": "x"})
    assert missing.status == 404 and missing.content_type == "application/problem+json"
    refused = await patch(client, "nobody", {"description": "x"}, token=OPERATE_TOKEN)
    assert refused.status == 403


def test_merge_patch_follows_rfc_7396_appendix_a():
    cases = [
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        (["a", "b"], ["c", "d"], ["c", "d"]),
        ({"a": "b"}, ["c"], ["c"]),
        ({"a": "foo"}, None, None),
        ({"a": "foo"}, "bar", "bar"),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ]
    for target, change, result in cases:
        assert merge_patch(target, change) == result, (target, change)
