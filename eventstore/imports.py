"""Imports of envelopes signed elsewhere (mesh sync): verification, then the journal checks.

Everything that needs no head (decoding, the stream name, the hash, the origin's key and the
signature) is checked off the event loop, one share per allowed CPU, each share's signatures in
one C call (`verify_batch`, no GIL). What needs the head (seq, duplicate or equivocation, the
`prev` chain) is checked inside the writer's transaction (`stage_imports`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable, Sequence
from enum import StrEnum
from typing import NamedTuple

import lmdb
import msgspec
from nacl.signing import VerifyKey

from eventstore.envelope import Envelope, Event, decode_event, digest_of, signed_bytes
from eventstore.keychain import KeyChain, key_for_envelope
from eventstore.layout import Head, decode_record, event_key, validate_stream_name
from eventstore.signing import verify_batch

# origin → its key, or its KeyChain once it rotated keys (keychain.py), or None if unknown
KeyLookup = Callable[[str], VerifyKey | KeyChain | None]
MIN_VERIFY_SHARE = 32  # envelopes; a smaller share is verified by one thread


class ForeignEnvelope(NamedTuple):
    """An envelope signed elsewhere, as pushed by a peer (payload and signature raw)."""

    stream: str
    seq: int
    payload: bytes
    signature: bytes
    # who must have signed it, when the caller knows the journal changed writer (a handoff or
    # takeover its receiver accepted); None: whoever signed the journal's head
    writer: str | None = None


class ImportStatus(StrEnum):
    ACCEPTED = "accepted"
    MALFORMED = "malformed"
    UNKNOWN_ORIGIN = "unknown_origin"
    BAD_SIGNATURE = "bad_signature"
    GAP = "gap"
    DUPLICATE = "duplicate"
    EQUIVOCATION = "equivocation"
    BROKEN_CHAIN = "broken_chain"
    FOREIGN_WRITER = "foreign_writer"


class ImportResult(NamedTuple):
    status: ImportStatus
    envelope: Envelope | None = None
    detail: str = ""


class Verified(NamedTuple):
    """A foreign envelope whose hash and signature check out: it waits for the head checks."""

    foreign: ForeignEnvelope
    event: Event
    digest: bytes


def allowed_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):  # Linux: what taskset or a cgroup allows
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


async def verify_foreign(
    items: Sequence[ForeignEnvelope], key_for_origin: KeyLookup
) -> list[ImportResult | Verified]:
    """`precheck` of every item, one share per allowed CPU on the loop's executor (at least
    `MIN_VERIFY_SHARE` a share), in the order of `items`."""
    loop = asyncio.get_running_loop()
    items = list(items)
    shares = max(1, min(allowed_cpus(), len(items) // MIN_VERIFY_SHARE))
    size = max(1, -(-len(items) // shares))
    checked = await asyncio.gather(
        *(
            loop.run_in_executor(None, precheck, items[i : i + size], key_for_origin)
            for i in range(0, len(items), size)
        )
    )
    return [result for share in checked for result in share]


def precheck(
    items: list[ForeignEnvelope], key_for_origin: KeyLookup
) -> list[ImportResult | Verified]:
    """Decode, hash and verify each foreign envelope: everything that needs no head. The
    signatures are checked in one call (`verify_batch`: C, no GIL)."""
    out: list[ImportResult | Verified] = []
    checks: list[tuple[bytes, bytes, bytes]] = []
    pending: list[int] = []  # the index in `out` of each check
    for item in items:
        try:
            validate_stream_name(item.stream)
            if item.seq < 1:
                raise ValueError("seq must be at least 1")
            event = decode_event(item.payload)
        except (ValueError, msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
            out.append(ImportResult(ImportStatus.MALFORMED, detail=str(exc)))
            continue
        key = key_for_envelope(key_for_origin(event.origin), item.stream, item.seq)
        if key is None:
            out.append(ImportResult(ImportStatus.UNKNOWN_ORIGIN, detail=f"origin {event.origin!r}"))
            continue
        digest = digest_of(item.payload)
        checks.append((bytes(key), signed_bytes(item.stream, item.seq, digest), item.signature))
        pending.append(len(out))
        out.append(Verified(item, event, digest))
    for index, verified in zip(pending, verify_batch(checks), strict=True):
        if not verified:
            out[index] = ImportResult(
                ImportStatus.BAD_SIGNATURE, detail="signature does not verify"
            )
    return out


def stage_imports(
    verified: Sequence[Verified],
    results: list[ImportResult],
    head_of: Callable[[str], Head | None],
    txn: lmdb.Transaction[bytes],
    events_db: lmdb._Database,
    position: int,
    imported: dict[bytes, bytes],
    writers: dict[str, str],
) -> list[Envelope]:
    """Stage what extends its journal by one, from `position` on; append each item's outcome to
    `results`. `imported` holds what earlier requests of the batch staged (not yet in `txn`),
    so a second copy is a duplicate, not a fork. `writers` holds the origin of each journal's
    newest envelope staged in this batch: a journal has one writer, whoever signed its seq 1,
    and this is where that is settled for good (a receiver's screening may run before the
    journal's first envelopes are committed)."""
    staged: list[Envelope] = []
    overlay: dict[str, Head] = {}
    for foreign, event, digest in verified:
        head = overlay.get(foreign.stream) or head_of(foreign.stream)
        head_seq = head.seq if head else 0
        if foreign.seq <= head_seq:
            key = event_key(foreign.stream, foreign.seq)
            held = imported.get(key)
            if held is None:
                stored = txn.get(key, db=events_db)
                held = decode_record(stored)[2] if stored is not None else None
            same = held == digest
            status = ImportStatus.DUPLICATE if same else ImportStatus.EQUIVOCATION
            results.append(ImportResult(status, detail=f"head is {head_seq}"))
            continue
        if foreign.seq != head_seq + 1:
            results.append(ImportResult(ImportStatus.GAP, detail=f"expected seq {head_seq + 1}"))
            continue
        expected_prev = head.payload_hash if head else ""
        if event.prev != expected_prev:
            results.append(
                ImportResult(ImportStatus.BROKEN_CHAIN, detail="prev does not match head")
            )
            continue
        if head is not None:
            writer = (
                foreign.writer
                or writers.get(foreign.stream)
                or _origin_at(txn, events_db, foreign.stream, head)
            )
            if event.origin != writer:
                detail = f"journal is written by {writer!r}, envelope by {event.origin!r}"
                results.append(ImportResult(ImportStatus.FOREIGN_WRITER, detail=detail))
                continue
        envelope = Envelope(
            foreign.stream, foreign.seq, foreign.payload, digest, foreign.signature, event, position
        )
        position += 1
        staged.append(envelope)
        imported[event_key(foreign.stream, foreign.seq)] = digest
        overlay[foreign.stream] = Head(foreign.seq, digest)
        writers[foreign.stream] = event.origin
        results.append(ImportResult(ImportStatus.ACCEPTED, envelope))
    return staged


def _origin_at(
    txn: lmdb.Transaction[bytes], events_db: lmdb._Database, stream: str, head: Head
) -> str:
    """Who signed a journal's stored head ("" when it cannot be read: nothing matches it)."""
    stored = txn.get(event_key(stream, head.seq), db=events_db)
    if stored is None:
        return ""
    return decode_event(decode_record(stored)[1]).origin


def merge(
    checked: Sequence[ImportResult | Verified], stored: Iterable[ImportResult]
) -> list[ImportResult]:
    """The outcome of each item in its order: its precheck's refusal, or the writer's verdict
    (`stored`, one per `Verified`, in their order)."""
    verdicts = iter(stored)
    return [r if isinstance(r, ImportResult) else next(verdicts) for r in checked]
