"""Which public key verifies envelopes from which origin node."""

from __future__ import annotations

from nacl.signing import SigningKey, VerifyKey

from eventstore.keys import verify_key_from_multibase
from eventstore.store import EventStore, KeyLookup
from node.config import Config


def key_resolver(config: Config, key: SigningKey, store: EventStore | None = None) -> KeyLookup:
    """This node's own key, then peers' keys from the config."""
    keys: dict[str, VerifyKey] = {config.node.name: key.verify_key}
    for peer in config.peers:
        if peer.public_key:
            keys[peer.name] = verify_key_from_multibase(peer.public_key)
    return keys.get
