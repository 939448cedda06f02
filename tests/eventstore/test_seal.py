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


async def test_a_sealed_journal_opens_again_only_by_a_fence(store):
    await store.append_sealing("alpha", "note", {})
    with pytest.raises(Fenced):
        await store.append("alpha", "note", {})
    store.fence("alpha", None)
    assert (await store.append("alpha", "note", {})).seq == 2
