"""Every read model equals a rebuild of it from position 0 of the journal."""

from eventstore.store import NewEvent
from node.context import CONTEXT
from projections.entries import Findings, Logs
from projections.journals import Journals
from tests.support import OPERATE_TOKEN, auth


async def test_rebuild_from_zero_equals_live_state(client):
    ctx = client.app[CONTEXT]
    for name in ("a0", "a1", "a2"):  # journals that exist: findings are posted about them
        await ctx.store.append(name, "state.set", {"key": "k", "value": "v"})
    for i in range(30):
        await client.post(
            "/api/v1/findings",
            json={"agent": f"a{i % 3}", "severity": "low", "title": str(i)},
            headers=auth(OPERATE_TOKEN),
        )
        await ctx.store.append(f"a{i % 2}", "log", {"level": "warn", "message": str(i)})
    rebuilt = ctx.projections.fresh()
    rebuilt.rebuild(ctx.store.iter_chunks(0, size=7))
    assert rebuilt.position == ctx.projections.position == ctx.store.last_position
    assert rebuilt.snapshot() == ctx.projections.snapshot()
    assert rebuilt.get(Findings).last_seq == 30 and rebuilt.get(Logs).last_seq == 30


async def test_folding_twice_is_harmless(client):
    ctx = client.app[CONTEXT]
    await ctx.store.append("a", "log", {"level": "info", "message": "once"})
    ctx.projections.apply(ctx.store.read_all())
    assert ctx.projections.get(Logs).last_seq == 1


async def test_a_fold_overlapping_what_was_folded_skips_the_overlap(client):
    ctx = client.app[CONTEXT]
    await ctx.store.append_many(
        [NewEvent(f"a{i % 3}", "log", {"level": "info", "message": str(i)}) for i in range(600)]
    )
    everything = ctx.store.read_all(0, limit=1000)
    once = ctx.projections.fresh()
    once.apply(everything)  # several runs for the batch folders
    twice = ctx.projections.fresh()
    twice.apply(everything[:300])
    twice.apply(everything)  # starts with 300 folded already, in the middle of a run
    assert twice.snapshot() == once.snapshot() == ctx.projections.snapshot()
    assert twice.position == ctx.store.last_position
    assert twice.get(Logs).last_seq == 600
    assert [twice.get(Journals).head[f"a{i}"] for i in range(3)] == [200, 200, 200]
