"""Hand-made envelopes for the projection tests: real payloads, digests and signatures.

Projections only read `stream`, `seq`, `position`, `digest` and the decoded `event`, but the
envelopes are built exactly as the store builds them (msgpack payload, its sha256, an ed25519
signature over stream, seq and digest), so a test never folds something the node could not.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from nacl.signing import SigningKey

from eventstore.envelope import Envelope, Event, digest_of, encode_event, sign
from projections.base import Projections
from projections.disk import DiskModels
from projections.ownership import Owners

P = TypeVar("P")

# A fixed key, so envelopes (and their signatures: ed25519 is deterministic) are reproducible.
TEST_KEY = SigningKey(bytes(range(32)))
ORIGIN = "node-test"
START = datetime(2026, 1, 1, tzinfo=UTC)


def ts_at(seconds: float) -> str:
    """A timestamp `seconds` after START in the journal's format (ISO 8601, microseconds, Z)."""
    moment = START + timedelta(seconds=seconds)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def envelope(
    stream: str,
    seq: int,
    type: str,
    data: dict[str, Any],
    *,
    position: int,
    ts: str | None = None,
    origin: str = ORIGIN,
    prev: str = "",
) -> Envelope:
    """One signed envelope as the store would return it (ts defaults to START + position s)."""
    event = Event(
        type=type, ts=ts if ts is not None else ts_at(position), origin=origin, prev=prev, data=data
    )
    payload = encode_event(event)
    digest = digest_of(payload)
    return Envelope(
        stream=stream,
        seq=seq,
        payload=payload,
        digest=digest,
        signature=sign(TEST_KEY, stream, seq, digest),
        event=event,
        position=position,
    )


class Journal:
    """Appends like the store: seq per stream from 1, one global position, `prev` chained."""

    def __init__(self, origin: str = ORIGIN) -> None:
        self.origin = origin
        self.envelopes: list[Envelope] = []
        self._heads: dict[str, Envelope] = {}

    def add(
        self, stream: str, type: str, data: dict[str, Any], *, ts: str | None = None
    ) -> Envelope:
        head = self._heads.get(stream)
        made = envelope(
            stream,
            head.seq + 1 if head else 1,
            type,
            data,
            position=len(self.envelopes) + 1,
            ts=ts,
            origin=self.origin,
            prev=head.payload_hash if head else "",
        )
        self.envelopes.append(made)
        self._heads[stream] = made
        return made


def fold(projection: P, envelopes: Iterable[Envelope], *, guarded: bool = True) -> P:
    """Fold through a `Projections` registry, as the node does (so `handles` is honoured).

    An on-disk read model (one with `bind`) lives in a scratch LMDB environment, folded with
    the ownership rule (`Owners`) in front of it as in the node, unless `guarded` is False."""
    if hasattr(projection, "bind"):
        models: list[Any] = [projection]
        if guarded and not isinstance(projection, Owners):
            models.insert(0, Owners())
        disk = projection.__dict__.get("_scratch") or DiskModels(models).scratch()
        projection.__dict__["_scratch"] = disk  # the environment lives as long as the model
        Projections([], disk).apply(envelopes)
    else:
        Projections([projection]).apply(envelopes)  # type: ignore[list-item]
    return projection


def refolded_snapshot(projection: Any, envelopes: Iterable[Envelope]) -> Any:
    """The snapshot of a fresh instance of the projection's class folded from `envelopes`."""
    return fold(type(projection)(), envelopes).snapshot()
