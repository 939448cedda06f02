"""Projection checkpoints: used when they fit the journal and the code, ignored otherwise."""

import pickle

from node.app import build_app
from node.context import CONTEXT
from node.ops import checkpoint
from tests.support import OPERATE_TOKEN, auth


async def run_node(aiohttp_client, config, findings: int):
    client = await aiohttp_client(build_app(config))
    for i in range(findings):
        response = await client.post(
            "/api/v1/findings",
            json={"agent": "node-a", "severity": "low", "title": str(i)},
            headers=auth(OPERATE_TOKEN),
        )
        assert response.status == 201
    ctx = client.app[CONTEXT]
    snapshot = ctx.projections.snapshot()
    await client.close()
    return ctx, snapshot


async def test_clean_shutdown_writes_a_checkpoint_that_the_next_start_uses(aiohttp_client, config):
    _, before = await run_node(aiohttp_client, config, 5)
    assert (config.data_path / checkpoint.CHECKPOINT_FILE).exists()
    _ctx, after = await run_node(aiohttp_client, config, 3)
    assert len(after["findings"]["entries"]) == 8
    assert after["findings"]["entries"][:5] == before["findings"]["entries"]

    # the restored-then-folded state equals a rebuild from position 0
    ctx2 = build_app(config)[CONTEXT]
    assert checkpoint.restore(ctx2.projections, ctx2.store, config.data_path)
    assert ctx2.projections.position == 8
    ctx2.projections.rebuild(ctx2.store.iter_chunks(ctx2.projections.position))
    fresh = ctx2.projections.fresh()
    fresh.rebuild(ctx2.store.iter_chunks())
    assert fresh.snapshot() == ctx2.projections.snapshot() == after
    ctx2.store.close_sync()


async def test_a_checkpoint_that_does_not_fit_is_ignored(aiohttp_client, config):
    await run_node(aiohttp_client, config, 2)
    path = config.data_path / checkpoint.CHECKPOINT_FILE
    saved = pickle.loads(path.read_bytes())

    ctx = build_app(config)[CONTEXT]
    for change in ({"fingerprint": "other code"}, {"payload_hash": "sha256:00"}, {"position": 99}):
        path.write_bytes(pickle.dumps({**saved, **change}))
        assert not checkpoint.restore(ctx.projections, ctx.store, config.data_path)
        assert ctx.projections.position == 0
    path.write_bytes(b"garbage")
    assert not checkpoint.restore(ctx.projections, ctx.store, config.data_path)
    ctx.store.close_sync()
