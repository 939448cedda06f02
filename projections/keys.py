"""Node key rotations as the mesh has them: `node.key_rotated` events in each node's key journal.

A node's key journal is `@<node name>`: replicated like an agent's journal (so peers, including
those offline during a rotation, receive the rotation like any other envelope), written only by
that node. Each event names the previous and the new public key and the heads of every journal
the previous key signed, and is signed by the previous key. The fold keeps an unbroken chain
per node: an event whose previous key is not the node's last new key is ignored.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from eventstore.envelope import Envelope
from eventstore.keys import verify_key_from_multibase
from projections.catalogue import KEY_ROTATED, MAX_ROTATION_HEADS

KEY_JOURNAL_PREFIX = "@"


def key_journal(node: str) -> str:
    return KEY_JOURNAL_PREFIX + node


def is_key_journal(stream: str) -> bool:
    return stream.startswith(KEY_JOURNAL_PREFIX)


class Rotation(NamedTuple):
    previous_public_key: str
    new_public_key: str
    heads: dict[str, int]
    ts: str


class KeyHistory:
    name = "keys"
    handles = frozenset({KEY_ROTATED})

    def __init__(self) -> None:
        self.rotations: dict[str, list[Rotation]] = {}

    def apply(self, envelope: Envelope) -> None:
        event = envelope.event
        if envelope.stream != key_journal(event.origin):
            return  # only a node's own key journal speaks for its key
        rotation = _rotation(event.data, event.ts)
        if rotation is None:
            return
        chain = self.rotations.setdefault(event.origin, [])
        if chain and chain[-1].new_public_key != rotation.previous_public_key:
            return
        chain.append(rotation)

    def current(self, node: str) -> str | None:
        """The node's newest key by its signed rotations; None if it never rotated."""
        chain = self.rotations.get(node)
        return chain[-1].new_public_key if chain else None

    def retired(self, node: str) -> list[Rotation]:
        return list(self.rotations.get(node, ()))

    def snapshot(self) -> dict[str, Any]:
        return {
            node: [
                {"previous": r.previous_public_key, "new": r.new_public_key, "ts": r.ts}
                for r in chain
            ]
            for node, chain in sorted(self.rotations.items())
        }


def _rotation(data: dict[str, Any], ts: str) -> Rotation | None:
    previous, new, heads = (
        data.get("previous_public_key"),
        data.get("new_public_key"),
        data.get("heads"),
    )
    if not (isinstance(previous, str) and isinstance(new, str) and isinstance(heads, dict)):
        return None
    if previous == new or len(heads) > MAX_ROTATION_HEADS:
        return None
    try:
        verify_key_from_multibase(previous)
        verify_key_from_multibase(new)
    except ValueError:
        return None
    if not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
        for k, v in heads.items()
    ):
        return None
    return Rotation(previous, new, dict(heads), ts)
