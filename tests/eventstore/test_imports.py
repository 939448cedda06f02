"""Imports of a peer's envelopes: verified off the loop, then checked against the head inside
the writer's transaction; every refusal is typed, results keep the order of the items."""

import pytest
from nacl.signing import SigningKey

from eventstore.imports import merge, precheck, verify_foreign
from eventstore.store import EventStore, ForeignEnvelope, ImportStatus
from tests.eventstore.support import KEY, PEER_KEY, foreign

KEYS = {"node-b": PEER_KEY.verify_key}.get
THIRD_KEY = SigningKey(b"\3" * 32)


async def peer_journal(tmp_path, name: str, count: int, **data):
    peer = EventStore(tmp_path / name, PEER_KEY, "node-b")
    peer.start()
    for i in range(count):
        await peer.append("scout", "finding", {"i": i, **data})
    envelopes = peer.read_stream("scout", 0, 10_000)
    await peer.close()
    return envelopes


async def test_import_accepts_a_peers_journal_in_order(store, tmp_path):
    envelopes = await peer_journal(tmp_path, "peer", 3)
    results = await store.import_envelopes(foreign(envelopes), KEYS)
    assert [r.status for r in results] == [ImportStatus.ACCEPTED] * 3
    stored = store.read_stream("scout")
    assert [(e.seq, e.payload, e.signature) for e in stored] == [
        (e.seq, e.payload, e.signature) for e in envelopes
    ]
    assert all(r.envelope.position > 0 for r in results)

    again = await store.import_envelopes(foreign(envelopes[:1]), KEYS)
    assert again[0].status == ImportStatus.DUPLICATE


async def test_import_rejections_are_typed(store, tmp_path):
    e1, e2, e3, _ = await peer_journal(tmp_path, "peer", 4)
    forged = ForeignEnvelope("scout", 1, e1.payload, KEY.sign(b"x").signature)
    unknown = await store.import_envelopes(foreign([e1]), {}.get)
    results = await store.import_envelopes(
        [
            forged,
            ForeignEnvelope("scout", 1, b"\xc1not msgpack", e1.signature),
            *foreign([e1, e3]),  # accepted, then a gap
        ],
        KEYS,
    )
    assert unknown[0].status == ImportStatus.UNKNOWN_ORIGIN
    assert [r.status for r in results] == [
        ImportStatus.BAD_SIGNATURE,
        ImportStatus.MALFORMED,
        ImportStatus.ACCEPTED,
        ImportStatus.GAP,
    ]

    # The origin signs a different envelope 1: equivocation.
    fork1, fork2 = await peer_journal(tmp_path, "fork", 2, fork=True)
    results = await store.import_envelopes(foreign([fork1, fork2, e2]), KEYS)
    assert [r.status for r in results] == [
        ImportStatus.EQUIVOCATION,
        ImportStatus.BROKEN_CHAIN,  # seq 2 of the fork does not follow our seq 1
        ImportStatus.ACCEPTED,
    ]
    assert store.head("scout").seq == 2


async def test_two_copies_in_one_batch_are_a_duplicate_not_a_fork(store, tmp_path):
    e1, e2 = await peer_journal(tmp_path, "peer", 2)
    # the second copy of e1 comes in the same push: it meets e1 staged, not yet stored
    results = await store.import_envelopes(foreign([e1, e1, e2]), KEYS)
    assert [r.status for r in results] == [
        ImportStatus.ACCEPTED,
        ImportStatus.DUPLICATE,
        ImportStatus.ACCEPTED,
    ]
    fork1, _ = await peer_journal(tmp_path, "fork", 2, fork=True)
    results = await store.import_envelopes(foreign([fork1]), KEYS)
    assert [r.status for r in results] == [ImportStatus.EQUIVOCATION]


async def test_verdicts_keep_the_order_of_items_across_verification_shares(store, tmp_path):
    envelopes = await peer_journal(tmp_path, "peer", 150)
    items = foreign(envelopes)
    # every tenth signature forged: refused before the head checks, so the ones after it gap
    for i in range(5, 150, 10):
        items[i] = items[i]._replace(signature=KEY.sign(b"x").signature)
    results = await store.import_envelopes(items, KEYS)
    assert len(results) == 150
    assert [r.status for r in results[:5]] == [ImportStatus.ACCEPTED] * 5
    assert results[5].status == ImportStatus.BAD_SIGNATURE
    assert {r.status for r in results[6:]} == {ImportStatus.GAP, ImportStatus.BAD_SIGNATURE}
    assert [r.status == ImportStatus.BAD_SIGNATURE for r in results] == [
        i % 10 == 5 for i in range(150)
    ]
    assert store.head("scout").seq == 5


@pytest.mark.parametrize(
    ("item", "detail"),
    [
        (ForeignEnvelope("", 1, b"", b""), "invalid stream name"),
        (ForeignEnvelope("a\0b", 1, b"", b""), "invalid stream name"),
        (ForeignEnvelope("scout", 0, b"", b""), "seq must be at least 1"),
        (ForeignEnvelope("scout", 1, b"\x93\x01\x02\x03", b""), ""),  # not an event
    ],
)
def test_malformed_items_are_refused_before_any_key_is_looked_up(item, detail):
    looked_up: list[str] = []
    (result,) = precheck([item], lambda origin: looked_up.append(origin))
    assert result.status == ImportStatus.MALFORMED and detail in result.detail
    assert looked_up == []


async def test_an_envelope_signed_by_another_key_of_a_known_origin_is_refused(store, tmp_path):
    (e1,) = await peer_journal(tmp_path, "peer", 1)
    results = await store.import_envelopes(foreign([e1]), {"node-b": KEY.verify_key}.get)
    assert results[0].status == ImportStatus.BAD_SIGNATURE
    assert store.head("scout") is None


async def extended_by_another_node(tmp_path, envelopes):
    """`envelopes` (node-b's scout 1..n) and a seq n+1 that node-c signs onto them: a valid
    signature and chain, by a node that is not the journal's writer."""
    other = EventStore(tmp_path / "node-c", THIRD_KEY, "node-c")
    other.start()
    await other.import_envelopes(foreign(envelopes), KEYS)
    await other.append("scout", "finding", {"i": "not node-b's"})
    (extra,) = other.read_stream("scout", len(envelopes), 1)
    await other.close()
    return extra


THREE_KEYS = {"node-b": PEER_KEY.verify_key, "node-c": THIRD_KEY.verify_key}.get


async def test_a_journal_is_extended_only_by_the_origin_of_its_head(store, tmp_path):
    e1, e2 = await peer_journal(tmp_path, "peer", 2)
    extra = await extended_by_another_node(tmp_path, [e1, e2])
    # in one request (the head staged just before), then against the stored head
    results = await store.import_envelopes(foreign([e1, e2, extra]), THREE_KEYS)
    assert [r.status for r in results[:2]] == [ImportStatus.ACCEPTED] * 2
    assert results[2].status == ImportStatus.FOREIGN_WRITER
    assert "'node-b'" in results[2].detail and "'node-c'" in results[2].detail
    (again,) = await store.import_envelopes(foreign([extra]), THREE_KEYS)
    assert again.status == ImportStatus.FOREIGN_WRITER
    assert store.head("scout").seq == 2


async def test_the_writer_check_holds_for_imports_queued_before_the_head_is_stored(store, tmp_path):
    """A receiver screens a batch by the journal's known home; a batch screened while the one
    holding seq 1 still waits for the writer cannot know it: the writer settles it."""
    e1, e2 = await peer_journal(tmp_path, "peer", 2)
    extra = await extended_by_another_node(tmp_path, [e1, e2])
    first = await verify_foreign(foreign([e1, e2]), THREE_KEYS)
    second = await verify_foreign(foreign([extra]), THREE_KEYS)
    queued = [store.queue_imports(first), store.queue_imports(second)]
    stored = [merge(checked, await f) for checked, f in zip([first, second], queued, strict=True)]
    assert [r.status for r in stored[0]] == [ImportStatus.ACCEPTED] * 2
    assert [r.status for r in stored[1]] == [ImportStatus.FOREIGN_WRITER]
    assert store.head("scout").seq == 2
