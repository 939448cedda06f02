"""Which public key verifies envelopes from which origin node."""

from __future__ import annotations

from nacl.signing import SigningKey, VerifyKey

from eventstore.keys import verify_key_from_multibase
from eventstore.store import EventStore, KeyLookup
from node.config import Config
from node.sync.keys import pinned_keys


def key_resolver(config: Config, key: SigningKey, store: EventStore | None = None) -> KeyLookup:
    """Own key, peers' keys from the config, and (winning) the keys pinned in `$peers`."""
    keys: dict[str, VerifyKey] = {config.node.name: key.verify_key}
    for peer in config.peers:
        if peer.public_key:
            keys[peer.name] = verify_key_from_multibase(peer.public_key)
    if store is not None:
        keys.update({k: v for k, v in pinned_keys(store).items() if k != config.node.name})
    return keys.get
