"""Which journals exist, how far each goes, and which node is each one's home (its writer)."""

from __future__ import annotations

from eventstore.envelope import Envelope


class Journals:
    name = "journals"

    def __init__(self) -> None:
        self.home: dict[str, str] = {}
        self.head: dict[str, int] = {}

    def apply_batch(self, envelopes: list[Envelope]) -> None:
        """Every envelope comes here: one call per run keeps it off a replay's per-row cost."""
        home, head = self.home, self.head
        for envelope in envelopes:
            stream = envelope.stream
            head[stream] = envelope.seq
            if stream not in home:
                home[stream] = envelope.event.origin

    def home_of(self, stream: str) -> str | None:
        return self.home.get(stream)

    def snapshot(self) -> dict:
        return {"home": dict(sorted(self.home.items())), "head": dict(sorted(self.head.items()))}
