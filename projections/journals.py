"""Which journals exist, how far each goes, and which node is each one's home (its writer)."""

from __future__ import annotations

from operator import attrgetter
from typing import Any

from eventstore.envelope import Envelope

_stream, _seq = attrgetter("stream"), attrgetter("seq")


class Journals:
    name = "journals"

    def __init__(self) -> None:
        self.home: dict[str, str] = {}
        self.head: dict[str, int] = {}

    def apply(self, envelope: Envelope) -> None:
        self.home.setdefault(envelope.stream, envelope.event.origin)
        self.head[envelope.stream] = envelope.seq

    def apply_many(self, envelopes: list[Envelope]) -> None:
        """`apply` of each, in two C-level passes (a replay folds every envelope here): the
        heads in one `update`, the homes only when a batch names a journal not seen before
        (`home` and `head` always hold the same journals)."""
        home, head = self.home, self.head
        head.update(zip(map(_stream, envelopes), map(_seq, envelopes), strict=True))
        if len(head) != len(home):
            for envelope in envelopes:
                home.setdefault(envelope.stream, envelope.event.origin)

    def home_of(self, stream: str) -> str | None:
        return self.home.get(stream)

    def snapshot(self) -> dict[str, dict[str, Any]]:
        return {"home": dict(sorted(self.home.items())), "head": dict(sorted(self.head.items()))}
