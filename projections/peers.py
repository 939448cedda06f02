"""What this node knows about its mesh peers: pinned keys and acknowledged heads.

Pins and acks live in the node-level journal `$peers` (never replicated).
"""

from __future__ import annotations

from typing import Any

from eventstore.envelope import Envelope
from projections.catalogue import PEER_ACKED as ACKED
from projections.catalogue import PEER_KEY_PINNED as KEY_PINNED

PEERS_STREAM = "$peers"


class PeerBook:
    name = "peers"
    handles = frozenset({KEY_PINNED, ACKED})

    def __init__(self) -> None:
        self.pins: dict[str, str] = {}
        self.acks: dict[str, dict[str, int]] = {}

    def apply(self, envelope: Envelope) -> None:
        if envelope.stream != PEERS_STREAM:
            return
        event = envelope.event
        if event.type == KEY_PINNED:
            self._pin(event.data)
        elif event.type == ACKED:
            self._ack(event.data)

    def _pin(self, data: dict[str, Any]) -> None:
        peer, key = data.get("peer"), data.get("public_key")
        if isinstance(peer, str) and isinstance(key, str):
            self.pins.setdefault(peer, key)  # the first pin holds; a later key is refused

    def _ack(self, data: dict[str, Any]) -> None:
        peer, heads = data.get("peer"), data.get("heads")
        if not isinstance(peer, str) or not isinstance(heads, dict):
            return
        acked = self.acks.setdefault(peer, {})
        for stream, seq in heads.items():
            if isinstance(stream, str) and isinstance(seq, int):
                acked[stream] = seq

    def acked(self, peer: str, stream: str) -> int:
        return self.acks.get(peer, {}).get(stream, 0)

    def snapshot(self) -> dict[str, Any]:
        return {
            "pins": dict(sorted(self.pins.items())),
            "acks": {p: dict(sorted(a.items())) for p, a in sorted(self.acks.items())},
        }
