"""Offline verification of stored journals: hash, chain, signature and order of every envelope."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

import msgspec

from eventstore.envelope import decode_event, digest_of, verify_signature
from eventstore.keychain import key_for_envelope
from eventstore.store import EventStore, KeyLookup, decode_record


class AuditFailure(NamedTuple):
    stream: str
    seq: int
    reason: str

    def __str__(self) -> str:
        return f"{self.stream}#{self.seq}: {self.reason}"


class AuditReport(NamedTuple):
    streams: int
    envelopes: int
    failure: AuditFailure | None


def verify_journals(
    store: EventStore,
    key_for_origin: KeyLookup,
    streams: Iterable[str] | None = None,
    progress: Callable[[int], None] | None = None,
) -> AuditReport:
    """Walk journals in seq order and stop at the first envelope that does not hold up.

    Each journal is read in one snapshot (its head and records in one read transaction), so
    a node appending meanwhile cannot make its records end short of, or past, its head."""
    names = sorted(store.heads()) if streams is None else list(streams)
    checked = 0
    for stream in names:
        with store.stream_snapshot(stream) as (head, records):
            if head is None:
                return AuditReport(len(names), checked, AuditFailure(stream, 0, "no such journal"))
            prev_hash, expected_seq = "", 1
            for seq, raw in records:
                failure = _check(stream, seq, raw, expected_seq, prev_hash, key_for_origin)
                if not isinstance(failure, _Ok):
                    return AuditReport(len(names), checked, AuditFailure(stream, seq, failure))
                prev_hash, expected_seq = failure, seq + 1
                checked += 1
                if progress and checked % 1000 == 0:
                    progress(checked)
        if progress:
            progress(checked)
        if expected_seq - 1 != head.seq or (head.seq and prev_hash != head.payload_hash):
            reason = f"head says seq {head.seq} but the journal ends at {expected_seq - 1}"
            return AuditReport(len(names), checked, AuditFailure(stream, head.seq, reason))
    return AuditReport(len(names), checked, None)


class _Ok(str):
    """The payload_hash of an envelope that passed (so the next one can check its prev)."""


def _check(
    stream: str, seq: int, raw: bytes, expected_seq: int, prev_hash: str, key_for_origin: KeyLookup
) -> str:
    if seq != expected_seq:
        return f"expected seq {expected_seq}"
    try:
        _position, payload, digest, signature = decode_record(raw)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        return f"stored record is unreadable: {exc}"
    if digest_of(payload) != digest:
        return "payload does not match its stored sha256"
    try:
        event = decode_event(payload)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        return f"payload does not decode: {exc}"
    if event.prev != prev_hash:
        return "prev does not match the previous envelope's payload_hash (broken chain)"
    key = key_for_envelope(key_for_origin(event.origin), stream, seq)
    if key is None:
        return f"no public key known for origin {event.origin!r}"
    if not verify_signature(key, stream, seq, digest, signature):
        return "signature does not verify"
    return _Ok("sha256:" + digest.hex())
