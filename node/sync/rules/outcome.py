"""What a batch's receive says: how many envelopes were accepted, which were not and why."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import msgspec

from eventstore.store import ImportStatus
from projections.catalogue import JOURNAL_HANDOFF, JOURNAL_TAKEOVER

NODE_LEVEL = "node_level"
FOREIGN_WRITER = "foreign_writer"
BAD_TAKEOVER = "bad_takeover"
BAD_HANDOFF = "bad_handoff"
UNJUDGED = "takeover_unverified"  # the judge could not look (no NATS link, no answer)
GAP = ImportStatus.GAP.value
MOVES = (JOURNAL_TAKEOVER, JOURNAL_HANDOFF)  # events that change a journal's writer
STAGED_PEER = "(stream)"  # who pushed a staged batch, as far as a fork's finding says
log = logging.getLogger("agent-node.sync")


class Rejection(msgspec.Struct):
    index: int
    agent: str | None
    seq: int | None
    reason: str
    detail: str = ""


@dataclass
class PushOutcome:
    accepted: int = 0
    rejections: list[Rejection] = field(default_factory=list)
    heads: dict[str, int] = field(default_factory=dict)

    def as_reply(self) -> dict[str, Any]:
        return {
            "accepted": self.accepted,
            "rejected": len(self.rejections),
            "heads": self.heads,
            "rejections": msgspec.to_builtins(self.rejections),
        }


def log_rejections(peer_id: str, outcome: PushOutcome) -> None:
    """One line per push that had rejections: how many of each kind, and the first one."""
    kinds: dict[str, int] = {}
    for r in outcome.rejections:
        kinds[r.reason] = kinds.get(r.reason, 0) + 1
    first = outcome.rejections[0]
    log.info(
        "push from %s: %d accepted, %d rejected (%s); first: %r#%s %r",
        peer_id,
        outcome.accepted,
        len(outcome.rejections),
        ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())),
        first.agent,
        first.seq,
        first.detail or first.reason,
    )
