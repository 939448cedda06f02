"""`append_sealing`: the last append a node makes to a journal (a handoff, node/placement/):
nothing queued after it follows it, whatever its caller checked before (eventstore/writer.py)."""

from __future__ import annotations

import asyncio

import pytest

from eventstore.writer import Fenced


async def test_nothing_queued_after_a_sealing_append_follows_it(store):
    await store.append("alpha", "note", {"n": 1})
    sealing = store.append_sealing("alpha", "note", {"n": 2})
    behind = [store.append("alpha", "note", {"n": 3 + i}) for i in range(5)]  # queued after it
    sealed = await sealing
    assert sealed.seq == 2
    results = await asyncio.gather(*behind, return_exceptions=True)
    assert all(isinstance(r, Fenced) for r in results), results
    assert store.head("alpha").seq == 2
    other = await store.append("beta", "note", {})  # other journals are not touched
    assert other.seq == 1


async def test_a_sealed_journal_opens_again_only_once_owned_and_fenced(store):
    await store.append_sealing("alpha", "note", {})
    assert store.disowned("alpha")
    store.fence("alpha", None)  # a lease renewal: it does not lift a seal
    with pytest.raises(Fenced):
        await store.append("alpha", "note", {})
    store.own("alpha")
    with pytest.raises(Fenced):  # owned, but blocked until a fence says how long
        await store.append("alpha", "note", {})
    store.fence("alpha", None)
    assert (await store.append("alpha", "note", {})).seq == 2


async def test_a_disowned_journal_refuses_appends_whatever_a_fence_says(store):
    """A journal another node writes now (node/placement/): no renewal's fence lifts it."""
    await store.append("alpha", "note", {})
    store.disown("alpha")
    store.fence("alpha", 1e18)
    with pytest.raises(Fenced):
        await store.append("alpha", "note", {})
    assert store.head("alpha").seq == 1
    store.own("alpha")
    store.fence("alpha", 1e18)
    assert (await store.append("alpha", "note", {})).seq == 2
