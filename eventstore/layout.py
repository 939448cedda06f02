"""The journal's on-disk format: its three databases, their keys and records, stream names.

  events: stream \\0 seq(8, big endian) → msgpack [position, payload, digest, signature]
  all:    position(8, big endian)        → the events key (the one total order)
  heads:  stream                         → msgpack [seq, digest]
  meta:   b"rewound"                     → position(8): the newest position stored when a
                                           journal was last rewound (rewind.py)

Everything that turns those bytes into values, or values into those bytes, lives here, so the
format has one definition (DESIGN.md "Journal and envelopes"; docs/design.md "Layout").
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import NamedTuple

import lmdb
import msgspec

from eventstore.envelope import decode_each

EVENTS_DB, ALL_DB, HEADS_DB, META_DB = b"events", b"all", b"heads", b"meta"
REWOUND_KEY = b"rewound"
MAX_STREAM_BYTES = 200
SEQ_AT_END = struct.Struct(">Q")  # the last 8 bytes of an events key
Record = tuple[int, bytes, bytes, bytes]  # position, payload, digest, signature

_record_encoder = msgspec.msgpack.Encoder()
_record_decoder = msgspec.msgpack.Decoder(tuple[int, bytes, bytes, bytes])
_records_decoder = msgspec.msgpack.Decoder(list[tuple[int, bytes, bytes, bytes]])
_head_decoder = msgspec.msgpack.Decoder(tuple[int, bytes])


class JournalDbs(NamedTuple):
    """The journal's databases in its environment."""

    events: lmdb._Database
    all: lmdb._Database
    heads: lmdb._Database
    meta: lmdb._Database


def open_dbs(env: lmdb.Environment) -> JournalDbs:
    """Open (or create) the databases; before any other transaction of the environment."""
    return JournalDbs(
        env.open_db(EVENTS_DB), env.open_db(ALL_DB), env.open_db(HEADS_DB), env.open_db(META_DB)
    )


class Head(NamedTuple):
    """A journal's newest envelope: its seq and the sha256 of its payload."""

    seq: int
    digest: bytes

    @property
    def payload_hash(self) -> str:
        return "sha256:" + self.digest.hex()


def validate_stream_name(stream: str) -> None:
    """1-200 UTF-8 bytes without NUL: the NUL ends the name inside an events key."""
    raw = stream.encode()
    if not raw or b"\0" in raw or len(raw) > MAX_STREAM_BYTES:
        raise ValueError(f"invalid stream name {stream!r}")


def event_key(stream: str, seq: int) -> bytes:
    return stream.encode() + b"\0" + seq.to_bytes(8, "big")


def stream_prefix(stream: str) -> bytes:
    """What every events key of the stream starts with (the key then holds 8 more bytes)."""
    return stream.encode() + b"\0"


def position_key(position: int) -> bytes:
    return position.to_bytes(8, "big")


# (position, payload, digest, signature) → a stored record: the encoder's own method, since the
# writer calls it once per envelope
encode_record: Callable[[Record], bytes] = _record_encoder.encode


def decode_record(raw: bytes) -> Record:
    """A stored record → (position, payload, digest, signature)."""
    return _record_decoder.decode(raw)


def decode_records(raws: list[bytes]) -> list[Record]:
    """`decode_record` of each, in one call (one damaged record raises its own error)."""
    return decode_each(raws, _records_decoder, decode_record)


def encode_head(head: Head) -> bytes:
    return _record_encoder.encode(head)


def decode_head(raw: bytes) -> Head:
    return Head(*_head_decoder.decode(raw))


class StreamNames(dict[bytes, str]):
    """Decoded stream names by their key prefix: one `str` per journal, not one per row."""

    def __missing__(self, prefix: bytes) -> str:
        self[prefix] = name = prefix.decode()
        return name
