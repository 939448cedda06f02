"""The envelope format of DESIGN.md: payload bytes, their sha256, and an ed25519 signature.

The exact payload bytes are signed and stored; a payload is never re-serialised to verify it.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import msgspec
from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

T = TypeVar("T")

SIGNING_DOMAIN = b"agent-runtime/envelope/v1\0"
HASH_PREFIX = "sha256:"
SIG_PREFIX = "ed25519:"


class Event(msgspec.Struct, frozen=True, gc=False):
    """The signed payload: what happened, when, on which node, after which envelope."""

    type: str
    ts: str
    origin: str
    prev: str
    data: dict[str, Any]


class Envelope(msgspec.Struct, frozen=True, gc=False):
    """One stored (or received) event with everything needed to verify it."""

    stream: str
    seq: int
    payload: bytes
    digest: bytes
    signature: bytes
    event: Event
    position: int = 0

    @property
    def payload_hash(self) -> str:
        return HASH_PREFIX + self.digest.hex()

    @property
    def signature_text(self) -> str:
        return SIG_PREFIX + base64.b64encode(self.signature).decode()

    def as_read(self) -> dict[str, Any]:
        """The spec's "sync envelope (as read)" object."""
        return {
            "seq": self.seq,
            "agent": self.stream,
            "payload_hash": self.payload_hash,
            "timestamp": self.event.ts,
            "signature": self.signature_text,
        }

    def as_pushed(self) -> dict[str, Any]:
        """The spec's "sync envelope (as pushed)" object."""
        return {
            "seq": self.seq,
            "agent": self.stream,
            "payload": base64.b64encode(self.payload).decode(),
            "signature": self.signature_text,
        }


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Event)


def encode_event(event: Event) -> bytes:
    return _encoder.encode(event)


def decode_event(payload: bytes) -> Event:
    """Decode payload bytes; raises msgspec.DecodeError / ValidationError when malformed."""
    return _decoder.decode(payload)


def as_msgpack_array(values: list[bytes]) -> bytes:
    """Encoded msgpack values, each whole, joined into one encoded array: a chunk of them is
    then decoded in one call instead of one call per value (a replay's largest per-row cost)."""
    count = len(values)
    if count < 16:
        header = bytes((0x90 | count,))
    elif count < 1 << 16:
        header = b"\xdc" + count.to_bytes(2, "big")
    else:
        header = b"\xdd" + count.to_bytes(4, "big")
    return header + b"".join(values)


def decode_each(
    values: list[bytes],
    as_list: msgspec.msgpack.Decoder[list[T]],
    decode_one: Callable[[bytes], T],
) -> list[T]:
    """`decode_one` of each value, in one call of `as_list` (a decoder of `list[...]`). A value
    that is not exactly one msgpack value (stored data damaged past its hash, which `audit
    verify` reports) may fail the whole call: the values are then decoded one by one, which
    raises that value's own error."""
    try:
        return as_list.decode(as_msgpack_array(values))
    except (msgspec.DecodeError, msgspec.ValidationError):
        return [decode_one(value) for value in values]


_list_decoder = msgspec.msgpack.Decoder(list[Event])


def decode_events(payloads: list[bytes]) -> list[Event]:
    """`decode_event` of each stored payload, in one call."""
    return decode_each(payloads, _list_decoder, decode_event)


def utc_now() -> str:
    """ISO 8601 UTC with microseconds and a `Z`: sortable and unambiguous."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def signed_bytes(stream: str, seq: int, digest: bytes) -> bytes:
    return SIGNING_DOMAIN + stream.encode() + b"\0" + seq.to_bytes(8, "big") + digest


def sign(key: SigningKey, stream: str, seq: int, digest: bytes) -> bytes:
    return key.sign(signed_bytes(stream, seq, digest)).signature


def verify_signature(
    key: VerifyKey, stream: str, seq: int, digest: bytes, signature: bytes
) -> bool:
    try:
        key.verify(signed_bytes(stream, seq, digest), signature)
    except (BadSignatureError, ValueError):
        return False
    return True


def parse_signature(text: str) -> bytes:
    """`ed25519:<base64>` → 64 raw bytes; ValueError when it is anything else."""
    if not text.startswith(SIG_PREFIX):
        raise ValueError("signature must start with 'ed25519:'")
    raw = base64.b64decode(text[len(SIG_PREFIX) :], validate=True)
    if len(raw) != 64:
        raise ValueError("an ed25519 signature is 64 bytes")
    return raw


def digest_of(payload: bytes) -> bytes:
    return hashlib.sha256(payload).digest()
