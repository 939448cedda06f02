"""An origin's signing keys over time, after key rotations: which key signed which range.

A rotation is journaled with the heads (stream → last seq) of every journal the node wrote at
that moment, signed by the old key. Every envelope up to those heads was signed by the old key;
everything after, by the new one. So for an envelope (stream, seq) the signing key is the
previous key of the first rotation whose recorded head of that stream is at or past seq, else
the current key. A stolen old key therefore signs nothing a peer accepts past the rotation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from nacl.signing import VerifyKey


class RetiredKey(NamedTuple):
    key: VerifyKey
    heads: Mapping[str, int]  # the last seq of each journal this key signed


class KeyChain:
    """Keys of one origin: retired ones (oldest first) and the current one."""

    def __init__(self, retired: Sequence[RetiredKey], current: VerifyKey) -> None:
        self.retired = tuple(retired)
        self.current = current

    def for_envelope(self, stream: str, seq: int) -> VerifyKey:
        for retired in self.retired:
            if seq <= retired.heads.get(stream, 0):
                return retired.key
        return self.current


def key_for_envelope(found: VerifyKey | KeyChain | None, stream: str, seq: int) -> VerifyKey | None:
    """What a key lookup found (one key, a chain, or nothing) → the key for this envelope."""
    if isinstance(found, KeyChain):
        return found.for_envelope(stream, seq)
    return found
