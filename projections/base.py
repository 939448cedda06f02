"""A projection is a pure fold over envelopes in global order; the registry feeds them all.

Projections do no I/O: the node feeds them live commits, `rebuild` feeds them the journal from
position 0, and both must end in the same state (tests/test_projections.py proves it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from eventstore.envelope import Envelope


class Projection(Protocol):
    name: str

    def apply(self, envelope: Envelope) -> None:
        """Fold one envelope; must be deterministic and must not raise on unknown types."""

    def snapshot(self) -> Any:
        """Plain data that equals another instance's snapshot when their states are equal."""


class Projections:
    """The registered read models, folded together so they never disagree on a position."""

    def __init__(self, projections: Iterable[Projection] = ()) -> None:
        self._projections: dict[str, Projection] = {}
        self.position = 0
        for projection in projections:
            self.register(projection)

    def register(self, projection: Projection) -> None:
        if projection.name in self._projections:
            raise ValueError(f"projection {projection.name!r} registered twice")
        self._projections[projection.name] = projection

    def __getitem__(self, name: str) -> Any:
        return self._projections[name]

    def __iter__(self):
        return iter(self._projections.values())

    def apply(self, envelopes: Iterable[Envelope]) -> None:
        """Fold envelopes newer than the current position (older ones were folded already)."""
        projections = tuple(self._projections.values())
        for envelope in envelopes:
            if envelope.position <= self.position:
                continue
            for projection in projections:
                projection.apply(envelope)
            self.position = envelope.position

    def snapshot(self) -> dict[str, Any]:
        return {name: p.snapshot() for name, p in self._projections.items()}
