"""Imports of a peer's envelopes: verified off the loop, then checked against the head inside
the writer's transaction; every refusal is typed, results keep the order of the items."""

import pytest

from eventstore.imports import precheck
from eventstore.store import EventStore, ForeignEnvelope, ImportStatus
from tests.eventstore.support import KEY, PEER_KEY, foreign

KEYS = {"node-b": PEER_KEY.verify_key}.get


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
