"""A projection is a pure fold over envelopes in global order; the registry feeds them all.

Two kinds (docs/design.md, "Projections"): the in-memory ones here, bounded by live state
(journal heads, grants, peers, keys, packages), restored from a checkpoint (node/ops/checkpoint.py)
and folded on the loop; and the on-disk ones (projections/disk.py), which grow with history
and which the journal's writer folds in its own transactions. `Projections` answers `get` for
both and folds the on-disk ones itself only in a scratch copy (`fresh`). The node feeds live
commits, `rebuild` feeds the journal from position 0, and both must end in the same state
(tests/projections/test_projections.py proves it).

No envelope may stop the fold: a read model that raises on one envelope is reported to
`on_fault` (the node logs it, counts it and journals a finding) and the other read models, and
the later envelopes, are folded as usual, live or in a rebuild. Events that change a task or an
approval reach the read models only from the journal that owns it (projections/ownership.py).
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from operator import attrgetter
from typing import Any, Protocol, TypeVar, cast

from eventstore.envelope import Envelope
from projections.disk import DiskModels

Applier = Callable[[Envelope], None]
# Told when a read model raised: (the read model's name, the envelope, the exception).
FaultHook = Callable[[str, Envelope, Exception], None]
_log = logging.getLogger("agent-node.projections")


def _log_fault(name: str, envelope: Envelope, exc: Exception) -> None:
    _log.error("read model %s raised on %s#%s", name, envelope.stream, envelope.seq, exc_info=exc)


def _folds(projection: Projection, event_type: str) -> bool:
    """Whether the read model folds that event type (its optional `handles`; see Projection)."""
    handles: Container[str] | None = getattr(projection, "handles", None)
    return handles is None or event_type in handles


P = TypeVar("P")
_event_type = attrgetter("event.type")


class Projection(Protocol):
    name: str
    # Optional class attribute `handles`: the event types it folds (absent: every envelope).
    # It lets the registry skip calls that would do nothing, which matters on replay.

    # Optional `apply_many(envelopes)`: the same fold over a batch of new envelopes, in order,
    # which the registry then prefers (one call per chunk of a replay instead of one per
    # envelope). Only for a fold that may be repeated: if it raises, the registry folds that
    # batch again through `apply`, envelope by envelope, reporting what raises.
    # With `apply_many`, optional `rare` (event types) and `apply_rare(envelope)`: the part of
    # the fold for those types, called envelope by envelope before the batch's `apply_many`,
    # so that `apply_many` need not look for them in every batch (the journals' moves). It
    # must be idempotent: `apply` (the fallback) folds those types too.

    def apply(self, envelope: Envelope) -> None:
        """Fold one envelope; must be deterministic and must not raise on unknown types."""

    def snapshot(self) -> Any:
        """Plain data that equals another instance's snapshot when their states are equal."""


class Projections:
    """The registered read models, folded together so they never disagree on a position."""

    def __init__(
        self, projections: Iterable[Projection] = (), disk: DiskModels | None = None
    ) -> None:
        self.disk = disk
        self._projections: dict[str, Projection] = {}
        self._by_class: dict[type, Projection] = {}
        self._appliers_by_type: dict[str, tuple[Applier, ...]] = {}
        self._batched: tuple[Projection, ...] = ()  # the ones with `apply_many`
        self.on_fault: FaultHook = _log_fault
        self.position = 0
        self.last_digest = b""  # of the envelope at `position`, to check a checkpoint against
        for projection in projections:
            self.register(projection)

    def register(self, projection: Projection) -> None:
        if projection.name in self._projections:
            raise ValueError(f"projection {projection.name!r} registered twice")
        self._projections[projection.name] = projection
        self._by_class[type(projection)] = projection
        self._appliers_by_type.clear()
        self._batched = tuple(p for p in self._projections.values() if hasattr(p, "apply_many"))

    def get(self, kind: type[P]) -> P:
        """The registered read model of that class; an unregistered one is a bug of the
        wiring, so it raises (at start, where areas take their read models) rather than
        answering None."""
        found: Any = self._by_class.get(kind)
        if found is None and self.disk is not None:
            found = self.disk.get(kind)
        if found is None:
            raise LookupError(f"no {kind.__name__} read model is registered")
        return cast(P, found)

    def __iter__(self) -> Iterator[Projection]:
        """The in-memory read models (what a checkpoint holds)."""
        return iter(self._projections.values())

    def _appliers(self, event_type: str) -> tuple[Applier, ...]:
        """The envelope-by-envelope folds of that type (not those with `apply_many`)."""
        appliers = self._appliers_by_type.get(event_type)
        if appliers is None:
            appliers = tuple(
                p.apply
                for p in self._projections.values()
                if _folds(p, event_type) and p not in self._batched
            ) + tuple(
                p.apply_rare  # type: ignore[attr-defined]
                for p in self._batched
                if event_type in getattr(p, "rare", ())
            )
            self._appliers_by_type[event_type] = appliers
        return appliers

    def _fault(self, apply: Applier, envelope: Envelope, exc: Exception) -> None:
        # "" when absent: as falsy as None was, so the `or` picks the same name
        name: str = getattr(getattr(apply, "__self__", None), "name", "") or getattr(
            apply, "__qualname__", "?"
        )
        try:
            self.on_fault(name, envelope, exc)
        except Exception:  # the reporter failed too: the log line is all that is left
            _log_fault(name, envelope, exc)

    def apply(self, envelopes: Iterable[Envelope]) -> None:
        """Fold envelopes newer than the current position (older ones were folded already);
        the on-disk models too when they are a scratch copy (the node's journal folds its own)."""
        if self.disk is not None and self.disk.is_scratch:
            envelopes = list(envelopes)
            self.disk.fold_own(envelopes)
        self._apply_memory(envelopes)

    def _apply_memory(self, envelopes: Iterable[Envelope]) -> None:
        """`apply` of the in-memory read models alone."""
        by_type, appliers_of = self._appliers_by_type, self._appliers
        position, last = self.position, None
        fresh: list[Envelope] = []
        keep = fresh.append
        try:
            for envelope in envelopes:
                if envelope.position <= position:
                    continue
                appliers = by_type.get(envelope.event.type)
                if appliers is None:
                    appliers = appliers_of(envelope.event.type)
                for apply in appliers:
                    try:
                        apply(envelope)
                    except Exception as exc:  # one read model, one envelope: never the fold
                        self._fault(apply, envelope, exc)
                position, last = envelope.position, envelope
                keep(envelope)
        finally:  # the position moves once per call, not once per envelope (a replay's hot loop)
            if last is not None:
                self.position, self.last_digest = last.position, last.digest
            if fresh:
                self._apply_batched(fresh)

    def _apply_chunk(self, chunk: Sequence[Envelope]) -> None:
        """`_apply_memory` of a chunk of the journal, whose positions grow (`rebuild`): when
        its first envelope is new, all are, and one C-level pass over its event types finds
        whether any needs an envelope-by-envelope fold (in a replay, most chunks hold only
        findings and logs, which only `apply_many` folds here)."""
        if not chunk or chunk[0].position <= self.position:
            self._apply_memory(chunk)
            return
        by_type = self._appliers_by_type
        if any(by_type.get(kind, True) for kind in set(map(_event_type, chunk))):
            self._apply_memory(chunk)
            return
        fresh = chunk if isinstance(chunk, list) else list(chunk)
        self.position, self.last_digest = fresh[-1].position, fresh[-1].digest
        self._apply_batched(fresh)

    def _apply_batched(self, fresh: list[Envelope]) -> None:
        for projection in self._batched:
            try:
                projection.apply_many(fresh)  # type: ignore[attr-defined]
            except Exception:  # fold the batch again one by one: only what raises is skipped
                for envelope in fresh:
                    if _folds(projection, envelope.event.type):
                        try:
                            projection.apply(envelope)
                        except Exception as exc:
                            self._fault(projection.apply, envelope, exc)

    def rebuild(self, chunks: Iterable[Sequence[Envelope]]) -> None:
        """Bulk fold of chunks in order, each in position order (start-up, `replay`;
        `EventStore.iter_chunks`): with
        the cyclic GC paused, since read models only grow here, then frozen so later
        collections do not rescan them. A scratch copy's on-disk models fold in write
        transactions that span many chunks (`DiskModels.bulk`), with the same result as
        `apply` chunk by chunk."""
        gc.disable()
        try:
            disk = self.disk
            if disk is not None and disk.is_scratch:
                with disk.bulk() as fold_disk:
                    for chunk in chunks:
                        fold_disk(chunk)
                        self._apply_chunk(chunk)
            else:
                for chunk in chunks:
                    self._apply_chunk(chunk)
        finally:
            gc.enable()
            gc.freeze()

    def refold(self, chunks: Iterable[Sequence[Envelope]]) -> None:
        """Fold again from position 0, after the journal was rewound (eventstore/rewind.py):
        each in-memory read model is emptied in place, so whoever holds it keeps a current
        one, then `rebuild` folds `chunks` (the whole journal). The on-disk ones were refolded
        in the rewind's own transaction. Rare (a fork between epochs), so a full fold."""
        for projection in self._projections.values():
            state = type(projection)().__dict__
            projection.__dict__.clear()
            projection.__dict__.update(state)
        self.position, self.last_digest = 0, b""
        self.rebuild(chunks)

    def fresh(self) -> Projections:
        """Empty instances of the same projections (they take no constructor arguments)."""
        disk = self.disk.fresh() if self.disk is not None else None
        fresh = Projections((type(p)() for p in self._projections.values()), disk)
        fresh.on_fault = self.on_fault
        return fresh

    def snapshot(self) -> dict[str, Any]:
        state = {name: p.snapshot() for name, p in self._projections.items()}
        if self.disk is not None:
            state.update(self.disk.snapshot())
        return state
