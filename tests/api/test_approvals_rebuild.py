"""The tasks (with approvals), grants and registry read models equal a rebuild from position 0."""

from __future__ import annotations

import asyncio

from aiohttp import FormData

from node.app import build_app
from node.context import CONTEXT
from node.services.approvals import APPROVALS
from node.services.tasks import TASKS
from tests.polling import until
from tests.support import PUBLISH_TOKEN, auth, make_config, outcome, replicate, tiny_component

AGENTS = """
[[agents]]
name = "worker"
component = "agent.wasm"
[agents.grants]
domains = ["payments", "mail"]
"""


async def test_rebuild_from_zero_equals_live_state_and_survives_a_checkpoint(
    tmp_path, aiohttp_client
):
    wasm = tiny_component(tmp_path / "agent.wasm")
    config = make_config(tmp_path, AGENTS)
    client = await aiohttp_client(build_app(config))
    ctx = client.app[CONTEXT]
    gate, tasks = client.app[APPROVALS], client.app[TASKS]

    waiting = [
        asyncio.create_task(outcome(gate.ask("worker", "spend", str(i), 60))) for i in range(6)
    ]
    await until(lambda: gate.projection.count >= 6, what="six requests are pending")
    ids = [r.id for r in gate.projection.list()]
    await gate.decide(ids[0], "approve", "alice")
    await gate.decide_batch(ids[1:3], "deny", "bob")
    await replicate(ctx.store, "remote", "approval.requested", {"id": "r", "capability": "x"})
    for i in range(4):
        created = await tasks.create("planner", "worker", {"n": i})
        if i:
            await tasks.start(created["id"])
        if i == 2:
            await tasks.complete(created["id"], {"ok": True})
        if i == 3:
            await tasks.fail(created["id"], "boom")
    await client.post("/api/v1/broker/grants/worker/mail/revoke", headers=auth())
    for version in ("1.0.0", "1.1.0-rc.1", "0.9.0"):
        data = FormData()
        data.add_field("id", "worker")
        data.add_field("version", version)
        data.add_field("wasm", wasm, filename="a.wasm")
        response = await client.post(
            "/api/v1/registry/packages", data=data, headers=auth(PUBLISH_TOKEN)
        )
        assert response.status == 201

    rebuilt = ctx.projections.fresh()
    rebuilt.rebuild(ctx.store.iter_chunks(0, size=5))
    live = ctx.projections.snapshot()
    assert rebuilt.snapshot() == live
    for name in ("tasks", "grants", "registry"):
        assert live[name], name
    # the approvals' tables are folded by the tasks model, its part
    assert len(live["tasks"]["approvals"]["pending"]) == 4  # three undecided and the replica

    await client.close()  # a clean stop writes a checkpoint; the next start restores it
    for task in waiting:
        task.cancel()
    again = await aiohttp_client(build_app(config))
    restored = again.app[CONTEXT].projections.snapshot()
    # the runtime journals its own lifecycle events after the restart; these must not move
    for name in ("tasks", "grants", "registry"):
        assert restored[name] == live[name], name
