"""A push destination (URL, token, credentials) sealed to the nodes that may deliver it.

The client's webhook credential is a secret, and journals replicate to every peer; yet the
node that takes a placed agent over must go on delivering its tasks' notifications. So the
journal carries the destination only as libsodium sealed boxes (X25519, from each node's
ed25519 key, PyNaCl), one per node of the agent's placement set (this node alone for an agent
that is not placed): a peer outside the set holds ciphertext it cannot open, and the destination
never appears in clear in the journal, a log, an event stream or an error (docs/notifications.md,
"Where a client's credential is kept").
"""

from __future__ import annotations

import base64
from collections.abc import Mapping

import msgspec
from nacl.exceptions import CryptoError
from nacl.public import SealedBox
from nacl.signing import SigningKey, VerifyKey


class Destination(msgspec.Struct, frozen=True, array_like=True):
    """Where a push goes and how it authenticates; only ever in memory or sealed."""

    url: str
    token: str = ""
    scheme: str = ""
    credentials: str = ""


_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(Destination).decode


def seal(destination: Destination, keys: Mapping[str, VerifyKey]) -> dict[str, str]:
    """node name → base64 of the destination sealed to that node's key."""
    plain = _encode(destination)
    return {
        name: base64.b64encode(SealedBox(key.to_curve25519_public_key()).encrypt(plain)).decode()
        for name, key in sorted(keys.items())
    }


def unseal(sealed: Mapping[str, str], node: str, key: SigningKey) -> Destination | None:
    """This node's copy, opened; None when there is none or it does not open (sealed to a
    key this node no longer has, after `key rotate`)."""
    box = sealed.get(node)
    if box is None:
        return None
    try:
        plain = SealedBox(key.to_curve25519_private_key()).decrypt(base64.b64decode(box))
        return _decode(plain)
    except (CryptoError, ValueError, msgspec.DecodeError):
        return None
