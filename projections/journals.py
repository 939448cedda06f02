"""Which journals exist, how far each goes, and which node is each one's home (its writer)."""

from __future__ import annotations

from typing import Any

from eventstore.envelope import Envelope


class Journals:
    name = "journals"

    def __init__(self) -> None:
        self.home: dict[str, str] = {}
        self.head: dict[str, int] = {}

    def apply(self, envelope: Envelope) -> None:
        self.home.setdefault(envelope.stream, envelope.event.origin)
        self.head[envelope.stream] = envelope.seq

    def home_of(self, stream: str) -> str | None:
        return self.home.get(stream)

    def snapshot(self) -> dict[str, dict[str, Any]]:
        return {"home": dict(sorted(self.home.items())), "head": dict(sorted(self.head.items()))}
