"""Fault isolation in the commit path: a listener or read model made to raise on one envelope
never stops the others, never leaves a caller waiting, never aborts a rebuild or a start, and
is logged, counted and reported as a finding. Also: no journal type outside the catalogue ever
names an SSE frame."""

from __future__ import annotations

import asyncio

from eventstore.envelope import Envelope
from node.app import build_app
from node.context import CONTEXT
from tests.polling import until
from tests.support import READ_TOKEN, SseStream, auth, make_config

POISON = "poison"


class Fragile:
    """A read model with a bug: it raises on findings titled POISON."""

    name = "fragile"
    handles = frozenset({"finding"})

    def __init__(self) -> None:
        self.seen: list[str] = []

    def apply(self, envelope: Envelope) -> None:
        title = envelope.event.data.get("title")
        if title == POISON:
            raise RuntimeError("fragile read model cannot fold this")
        self.seen.append(title)

    def snapshot(self) -> list[str]:
        return list(self.seen)


def broken_listener(envelopes: list[Envelope]) -> None:
    """A commit listener with a bug: it raises on a batch holding a POISON finding."""
    if any(e.event.data.get("title") == POISON for e in envelopes):
        raise ValueError("listener bug")


async def post_finding(client, title: str, agent: str = "reporter") -> int:
    store = client.app[CONTEXT].store
    if store.head(agent) is None:  # findings are posted about a journal that exists
        await store.append(agent, "state.set", {"key": "k", "value": "v"})
    response = await client.post(
        "/api/v1/findings",
        json={"agent": agent, "severity": "low", "title": title},
        headers=auth(),
    )
    assert response.status == 201, await response.text()
    return (await response.json())["seq"]


async def fault_count(client, listener: str) -> float:
    text = await (await client.get("/api/v1/metrics", headers=auth(READ_TOKEN))).text()
    prefix = f'svc_listener_faults_total{{listener="{listener}"}} '
    line = next((x for x in text.splitlines() if x.startswith(prefix)), None)
    return float(line.rsplit(" ", 1)[1]) if line else 0.0


async def fault_findings(client) -> list[dict]:
    async def found() -> list[dict]:
        body = await (await client.get("/api/v1/findings", headers=auth(READ_TOKEN))).json()
        return [f for f in body["findings"] if f["agent"] == "node-a" and "failed on" in f["title"]]

    # the reporter journals them on its own task, just after the fault
    return await until(found, 5, "the fault's finding")


async def test_a_listener_that_raises_stops_neither_the_others_nor_the_caller(client):
    ctx = client.app[CONTEXT]
    after: list[int] = []

    ctx.store.add_commit_listener(broken_listener)
    ctx.store.add_commit_listener(lambda envelopes: after.extend(e.position for e in envelopes))

    seq = await asyncio.wait_for(post_finding(client, POISON), 5)  # the caller is released
    assert seq >= 1
    assert after, "the listener registered after the broken one still ran"
    await post_finding(client, "fine")
    assert len(after) >= 2
    assert await fault_count(client, "commit listener broken_listener") == 1
    [finding] = await fault_findings(client)
    assert finding["severity"] == "high"
    assert "reporter#2" in finding["title"]  # after the event that made the journal


async def test_a_read_model_that_raises_on_one_envelope_skips_only_that_one(
    tmp_path, aiohttp_client
):
    app = build_app(make_config(tmp_path))
    ctx = app[CONTEXT]
    fragile = Fragile()
    ctx.projections.register(fragile)
    client = await aiohttp_client(app)

    await post_finding(client, "before")
    await post_finding(client, POISON)  # answered: its read models (but one) folded it
    await post_finding(client, "after")
    body = await (await client.get("/api/v1/findings", headers=auth(READ_TOKEN))).json()
    titles = [f["title"] for f in body["findings"] if f["agent"] == "reporter"]
    assert titles == ["before", POISON, "after"]
    assert fragile.seen[:1] == ["before"] and "after" in fragile.seen
    assert await fault_count(client, "read model fragile") == 1
    assert len(await fault_findings(client)) == 1

    # a full rebuild over the poisoned journal neither raises nor differs from the live state
    rebuilt = ctx.projections.fresh()
    rebuilt.rebuild(ctx.store.iter_chunks())
    live = ctx.projections.snapshot()
    assert rebuilt.snapshot() == live
    await client.close()

    # and a start over it (rebuild from position 0 at start-up) works, reporting nothing twice
    (tmp_path / "data" / "projections.ckpt").unlink(missing_ok=True)
    app = build_app(make_config(tmp_path))
    app[CONTEXT].projections.register(Fragile())
    client = await aiohttp_client(app)
    assert (await client.get("/api/v1/findings", headers=auth(READ_TOKEN))).status == 200
    await post_finding(client, "after restart")
    assert await fault_count(client, "read model fragile") == 1  # the rebuild met it again
    await asyncio.sleep(0.2)
    assert len(await fault_findings(client)) == 1  # the same incident: journaled once


async def test_a_type_outside_the_catalogue_never_names_a_frame(client):
    ctx = client.app[CONTEXT]
    forged = "log\nid: 1\nevent: approval_requested\ndata: {}\n\nevent: x"
    async with SseStream(str(client.make_url("/")), "/api/v1/events", READ_TOKEN) as stream:
        await ctx.store.append("payer", forged, {"message": "a writer bug"})
        await ctx.store.append("payer", "custom.kind", {"message": "not catalogued"})
        marker = await ctx.store.append("payer", "log", {"level": "info", "message": "real"})
        [event] = await stream.take(1)
    assert (event.event, int(event.id)) == ("log", marker.position)
    assert event.json()["message"] == "real"
