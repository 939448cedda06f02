"""Logs and findings over HTTP: polling by seq, validation, and nothing written on bad input."""

import pytest

from node.app import build_app
from node.context import CONTEXT
from tests.support import (
    ADMIN_TOKEN,
    OPERATE_TOKEN,
    READ_TOKEN,
    auth,
    make_config,
    replicate,
    tiny_component,
)


async def post_finding(client, body, token=OPERATE_TOKEN):
    return await client.post("/api/v1/findings", json=body, headers=auth(token))


async def journal_of(client, name: str) -> None:
    """A journal the node holds (an agent's): findings are posted about one that exists."""
    await client.app[CONTEXT].store.append(name, "state.set", {"key": "k", "value": "v"})


async def test_post_then_poll_findings(client):
    await journal_of(client, "scanner")
    seqs = []
    for i in range(5):
        response = await post_finding(
            client, {"agent": "scanner", "severity": "high", "title": f"t{i}", "detail": "d"}
        )
        assert response.status == 201
        seqs.append((await response.json())["seq"])
    assert seqs == [1, 2, 3, 4, 5]

    response = await client.get("/api/v1/findings?since=0&limit=2", headers=auth(READ_TOKEN))
    page = await response.json()
    assert page["next_seq"] == 2
    assert [f["title"] for f in page["findings"]] == ["t0", "t1"]
    first = page["findings"][0]
    assert set(first) == {
        "seq",
        "ts",
        "agent",
        "severity",
        "title",
        "detail",
        "posted_by",
        "trace_id",
    }
    assert first["trace_id"] is None  # posted over the API: no run's
    assert first["agent"] == "scanner" and first["ts"].endswith("Z")
    assert first["posted_by"] == "operator"  # the token that posted it

    page = await (await client.get("/api/v1/findings?since=2", headers=auth(READ_TOKEN))).json()
    assert [f["seq"] for f in page["findings"]] == [3, 4, 5] and page["next_seq"] == 5
    page = await (await client.get("/api/v1/findings?since=5", headers=auth(READ_TOKEN))).json()
    assert page == {"next_seq": 5, "findings": []}


async def test_finding_detail_defaults_to_empty_and_lands_in_the_agents_journal(client):
    await journal_of(client, "ext.scanner-1")
    response = await post_finding(
        client, {"agent": "ext.scanner-1", "severity": "info", "title": "x"}
    )
    assert response.status == 201
    store = client.app[CONTEXT].store
    (_, envelope) = store.read_stream("ext.scanner-1")
    assert envelope.event.type == "finding"
    assert envelope.event.data == {
        "severity": "info",
        "title": "x",
        "detail": "",
        "posted_by": "operator",
    }


async def test_a_finding_about_a_name_not_hosted_here_is_kept_in_the_nodes_journal(client):
    """The spec's external integration: any well-formed name is 201 {seq}; a name this node
    does not host never becomes (or is written as) a journal of its own."""
    store = client.app[CONTEXT].store
    before = store.head("node-a").seq if store.head("node-a") else 0
    for agent, token in (("nosuch", OPERATE_TOKEN), ("trivy", ADMIN_TOKEN)):
        body = {"agent": agent, "severity": "high", "title": f"about {agent}", "detail": "d"}
        response = await post_finding(client, body, token)
        assert response.status == 201, await response.text()
        answer = await response.json()
        assert isinstance(answer["seq"], int)
        assert "no agent of that name is hosted on this node" in answer["note"]
        assert store.head(agent) is None  # no journal named after it
    assert store.head("node-a").seq == before + 2  # the node's own journal holds both
    last = store.read_stream("node-a")[-1].event
    assert last.data == {
        "severity": "high",
        "title": "about trivy",
        "detail": "d",
        "posted_by": "admin",
        "subject": "trivy",
    }
    page = await (await client.get("/api/v1/findings", headers=auth(READ_TOKEN))).json()
    assert [(f["agent"], f["posted_by"], f["title"]) for f in page["findings"]][-2:] == [
        ("nosuch", "operator", "about nosuch"),
        ("trivy", "admin", "about trivy"),
    ]
    # the node's own name: the spec's {seq} alone
    response = await post_finding(client, {"agent": "node-a", "severity": "low", "title": "n"})
    assert response.status == 201 and set(await response.json()) == {"seq"}


async def test_a_finding_about_a_replicas_agent_stays_out_of_the_replica(client):
    """A journal another node writes (a replica here) is never written: the finding about
    its agent goes into this node's own journal."""
    store = client.app[CONTEXT].store
    await replicate(store, "remote", "state.set", {"key": "k", "value": "v"}, origin="node-b")
    head = store.head("remote").seq
    body = {"agent": "remote", "severity": "low", "title": "seen from here"}
    response = await post_finding(client, body)
    assert response.status == 201, await response.text()
    assert store.head("remote").seq == head
    assert store.read_stream("node-a")[-1].event.data["subject"] == "remote"


async def test_the_node_itself_and_a_configured_agent_take_findings(aiohttp_client, tmp_path):
    tiny_component(tmp_path / "agent.wasm")
    config = make_config(tmp_path, '[[agents]]\nname = "quiet"\ncomponent = "agent.wasm"\n')
    client = await aiohttp_client(build_app(config))
    for agent in ("node-a", "quiet"):  # the node's own journal, a configured agent
        body = {"agent": agent, "severity": "low", "title": "n"}
        assert (await post_finding(client, body)).status == 201, agent
    # a scanner reports under its own token's name (post_finding posts as "operator")
    body = {"agent": "operator", "severity": "low", "title": "from the scanner"}
    response = await post_finding(client, body)
    assert response.status == 201 and "note" in await response.json()
    page = await (await client.get("/api/v1/findings", headers=auth(READ_TOKEN))).json()
    assert [f["agent"] for f in page["findings"]] == ["node-a", "quiet", "operator"]


async def test_a_posted_finding_is_told_apart_from_the_agents_own(client):
    store = client.app[CONTEXT].store
    await store.append("scanner", "finding", {"severity": "low", "title": "own", "detail": ""})
    response = await post_finding(
        client, {"agent": "scanner", "severity": "high", "title": "seen by ops"}, ADMIN_TOKEN
    )
    assert response.status == 201
    page = await (await client.get("/api/v1/findings", headers=auth(READ_TOKEN))).json()
    assert [(f["title"], f["posted_by"]) for f in page["findings"]] == [
        ("own", None),
        ("seen by ops", "admin"),
    ]


async def test_findings_default_limit_is_50_and_max_is_1000(client):
    store = client.app[CONTEXT].store
    for i in range(60):
        await store.append("a", "finding", {"severity": "low", "title": str(i), "detail": ""})
    page = await (await client.get("/api/v1/findings", headers=auth(READ_TOKEN))).json()
    assert len(page["findings"]) == 50
    page = await (await client.get("/api/v1/findings?limit=99999", headers=auth(READ_TOKEN))).json()
    assert len(page["findings"]) == 60


async def test_logs_are_polled_by_their_own_seq(client):
    store = client.app[CONTEXT].store
    for i in range(3):
        await store.append("worker", "log", {"level": "info", "message": f"m{i}"})
        await store.append("worker", "finding", {"severity": "low", "title": "f", "detail": ""})
    response = await client.get("/api/v1/logs", headers=auth(READ_TOKEN))
    page = await response.json()
    assert [(e["seq"], e["message"]) for e in page["logs"]] == [(1, "m0"), (2, "m1"), (3, "m2")]
    assert page["next_seq"] == 3
    assert set(page["logs"][0]) == {"seq", "ts", "level", "agent", "message", "trace_id"}
    page = await (await client.get("/api/v1/logs?since=1&limit=1", headers=auth(READ_TOKEN))).json()
    assert [e["seq"] for e in page["logs"]] == [2] and page["next_seq"] == 2


BAD_BODIES = [
    (b"{not json", "malformed JSON"),
    (b"[]", "invalid body"),
    (b'{"agent": "a", "severity": "high"}', "title"),
    (b'{"agent": "a", "severity": "urgent", "title": "t"}', "severity"),
    (b'{"agent": 5, "severity": "high", "title": "t"}', "agent"),
    (b'{"agent": "a", "severity": "high", "title": "t", "detail": 3}', "detail"),
    (b'{"agent": "-bad name", "severity": "high", "title": "t"}', "agent"),
    (b'{"agent": "a", "severity": "high", "title": ""}', "title"),
    (b'{"agent": "a", "severity": "high", "title": "t", "extra": 1}', "extra"),
    (b"", "JSON body"),
]


@pytest.mark.parametrize(("body", "mentions"), BAD_BODIES)
async def test_bad_finding_bodies_are_400_and_write_nothing(client, body, mentions):
    store = client.app[CONTEXT].store
    before = store.last_position
    response = await client.post(
        "/api/v1/findings",
        data=body,
        headers={**auth(OPERATE_TOKEN), "Content-Type": "application/json"},
    )
    assert response.status == 400
    assert response.content_type == "application/problem+json"
    problem = await response.json()
    assert problem["status"] == 400 and problem["title"] == "Bad Request"
    assert mentions in problem["detail"]
    assert store.last_position == before


@pytest.mark.parametrize("path", ["/api/v1/logs", "/api/v1/findings"])
@pytest.mark.parametrize("query", ["since=-1", "since=abc", "limit=-5", "limit=1.5", "since=1e3"])
async def test_bad_since_or_limit_is_400(client, path, query):
    response = await client.get(f"{path}?{query}", headers=auth(READ_TOKEN))
    assert response.status == 400
    assert (await response.json())["detail"].startswith("query parameter")


async def test_oversized_body_is_413(client):
    body = {"agent": "a", "severity": "low", "title": "t", "detail": "x" * (2 << 20)}
    response = await post_finding(client, body)
    assert response.status == 413
    assert response.content_type == "application/problem+json"


async def test_scopes(client):
    body = {"agent": "a", "severity": "low", "title": "t"}
    assert (await post_finding(client, body, READ_TOKEN)).status == 403
    assert (await client.post("/api/v1/findings", json=body)).status == 401
    bad = await client.get("/api/v1/findings", headers={"Authorization": "Bearer nope-nope"})
    assert bad.status == 401
    basic = await client.get("/api/v1/findings", headers={"Authorization": "Basic abc"})
    assert basic.status == 401
