"""The on-disk format: pinned byte for byte, since every data dir ever written depends on it."""

import lmdb
import msgspec
import pytest

from eventstore.layout import (
    Head,
    StreamNames,
    decode_head,
    decode_record,
    decode_records,
    encode_head,
    encode_record,
    event_key,
    position_key,
    stream_prefix,
    validate_stream_name,
)
from eventstore.store import EventStore
from tests.eventstore.support import KEY


def test_keys_are_stream_nul_big_endian_seq_and_big_endian_position():
    assert event_key("payer", 258) == b"payer\0" + bytes([0, 0, 0, 0, 0, 0, 1, 2])
    assert event_key("é", 1) == "é".encode() + b"\0" + (1).to_bytes(8, "big")
    assert stream_prefix("payer") == b"payer\0"
    assert position_key(258) == bytes([0, 0, 0, 0, 0, 0, 1, 2])
    # big-endian keys sort as their numbers do: LMDB's order is the journal's order
    assert sorted(event_key("s", n) for n in (10, 2, 300)) == [
        event_key("s", n) for n in (2, 10, 300)
    ]


def test_records_and_heads_are_msgpack_arrays():
    record = encode_record((7, b"payload", b"d" * 32, b"s" * 64))
    assert msgspec.msgpack.decode(record) == [7, b"payload", b"d" * 32, b"s" * 64]
    assert decode_record(record) == (7, b"payload", b"d" * 32, b"s" * 64)
    head = encode_head(Head(3, b"\xab" * 32))
    assert msgspec.msgpack.decode(head) == [3, b"\xab" * 32]
    assert decode_head(head) == Head(3, b"\xab" * 32)
    assert Head(3, b"\xab" * 32).payload_hash == "sha256:" + "ab" * 32


def test_records_decode_in_one_call_and_a_damaged_one_raises_its_own_error():
    records = [encode_record((n, b"p%d" % n, b"d", b"s")) for n in range(1, 4)]
    assert decode_records(records) == [(n, b"p%d" % n, b"d", b"s") for n in range(1, 4)]
    damaged = [*records[:2], records[2] + b"\x00"]  # one value too many: damage past the hash
    with pytest.raises(msgspec.DecodeError):
        decode_records(damaged)


def test_stream_names_are_1_to_200_bytes_without_nul():
    validate_stream_name("x" * 200)
    validate_stream_name("é" * 100)  # 200 bytes
    for bad in ["", "a\0b", "x" * 201, "é" * 101]:
        with pytest.raises(ValueError, match="invalid stream name"):
            validate_stream_name(bad)


def test_stream_names_decode_once_per_journal():
    names = StreamNames()
    first = names[b"payer"]
    assert first == "payer" and names[b"payer"] is first


async def test_a_stored_journal_is_exactly_this_layout(tmp_path):
    """Read the environment raw, without the store: the three databases hold what layout.py
    says (docs/design.md "Layout")."""
    store = EventStore(tmp_path / "j", KEY, "node-a")
    store.start()
    first = await store.append("payer", "log", {"n": 1})
    second = await store.append("payer", "log", {"n": 2})
    other = await store.append("worker", "log", {"n": 3})
    await store.close()
    env = lmdb.open(str(store.path), max_dbs=8, readonly=True)
    try:
        events, all_, heads = (env.open_db(name) for name in (b"events", b"all", b"heads"))
        with env.begin() as txn:
            assert [k for k, _ in txn.cursor(db=all_)] == [position_key(p) for p in (1, 2, 3)]
            assert [v for _, v in txn.cursor(db=all_)] == [
                event_key("payer", 1),
                event_key("payer", 2),
                event_key("worker", 1),
            ]
            for e in (first, second, other):
                raw = txn.get(event_key(e.stream, e.seq), db=events)
                assert decode_record(raw) == (e.position, e.payload, e.digest, e.signature)
            assert decode_head(txn.get(b"payer", db=heads)) == Head(2, second.digest)
            assert decode_head(txn.get(b"worker", db=heads)) == Head(1, other.digest)
    finally:
        env.close()
