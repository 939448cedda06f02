"""The envelope format of DESIGN.md, pinned by its test vectors."""

import base64

import msgspec
import pytest
from nacl.signing import SigningKey

from eventstore.envelope import (
    Event,
    as_msgpack_array,
    decode_event,
    decode_events,
    digest_of,
    encode_event,
    parse_signature,
    sign,
    signed_bytes,
    verify_signature,
)
from eventstore.keys import b58decode, b58encode, public_key_multibase, verify_key_from_multibase

ZERO_KEY = SigningKey(b"\0" * 32)


def test_design_test_vector():
    payload = b'{"hello":"world"}'
    digest = digest_of(payload)
    assert "sha256:" + digest.hex() == (
        "sha256:93a23971a914e5eacbf0a8d25154cda309c3c1c72fbb9914d47c60f3cb681588"
    )
    signature = sign(ZERO_KEY, "payer", 1, digest)
    assert "ed25519:" + base64.b64encode(signature).decode() == (
        "ed25519:gW3tK6uKrvANpe8gJwlYMF64Le9DCWn1/Gj7V9Q1BzRei2vcaqCWITNcjcR3wnPjsua37wNsKJtvQ4FJF6GHBA=="
    )
    assert bytes(ZERO_KEY.verify_key).hex().startswith("3b6a27bc")
    assert bytes(ZERO_KEY.verify_key).hex().endswith("59da29")
    assert verify_signature(ZERO_KEY.verify_key, "payer", 1, digest, signature)


def test_signed_bytes_layout():
    digest = bytes(range(32))
    assert signed_bytes("payer", 258, digest) == (
        b"agent-runtime/envelope/v1\0payer\0" + b"\0\0\0\0\0\0\x01\x02" + digest
    )


@pytest.mark.parametrize(
    ("stream", "seq", "digest"),
    [("other", 1, None), ("payer", 2, None), ("payer", 1, b"\1" * 32)],
)
def test_signature_binds_stream_seq_and_digest(stream, seq, digest):
    good = digest_of(b"x")
    signature = sign(ZERO_KEY, "payer", 1, good)
    assert not verify_signature(ZERO_KEY.verify_key, stream, seq, digest or good, signature)


def test_multibase_test_vector_round_trips():
    text = public_key_multibase(ZERO_KEY.verify_key)
    assert text == "z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp"
    assert bytes(verify_key_from_multibase(text)) == bytes(ZERO_KEY.verify_key)
    assert b58decode(b58encode(b"\0\0abc")) == b"\0\0abc"


@pytest.mark.parametrize(
    "text", ["gW3t", "ed25519:not base64!", "ed25519:" + base64.b64encode(b"short").decode()]
)
def test_bad_signature_text_is_refused(text):
    with pytest.raises(ValueError):
        parse_signature(text)


@pytest.mark.parametrize("count", [0, 1, 15, 16, 65_535, 65_536, 70_000])
def test_joined_values_decode_as_one_array_at_every_header_size(count):
    values = [msgspec.msgpack.encode(i) for i in range(count)]
    assert msgspec.msgpack.decode(as_msgpack_array(values)) == list(range(count))


def test_a_chunk_of_payloads_decodes_like_each_payload_alone():
    events = [Event("finding", "t", "n", f"p{i}", {"i": i, "s": "x" * i}) for i in range(40)]
    assert decode_events([encode_event(e) for e in events]) == events


@pytest.mark.parametrize("bad", [b"\xc1", encode_event(Event("log", "t", "n", "", {})) + b"\x00"])
def test_a_bad_payload_in_a_chunk_raises_its_own_error(bad):
    good = encode_event(Event("log", "t", "n", "", {}))
    with pytest.raises(msgspec.DecodeError) as alone:
        decode_event(bad)
    with pytest.raises(msgspec.DecodeError) as in_chunk:
        decode_events([good, bad, good])
    assert str(in_chunk.value) == str(alone.value)
