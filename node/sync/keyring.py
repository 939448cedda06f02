"""Which public key verifies envelopes from which origin node (after rotations: which range)."""

from __future__ import annotations

from nacl.signing import SigningKey, VerifyKey

from eventstore.keychain import KeyChain
from eventstore.keys import verify_key_from_multibase
from eventstore.store import EventStore, KeyLookup
from node.config.model import Config
from node.sync.keys import ChainCache, chain_of, pinned_keys
from projections.keys import KEY_JOURNAL_PREFIX, KeyHistory


def key_resolver(config: Config, key: SigningKey, store: EventStore | None = None) -> KeyLookup:
    """Own key, peers' keys from the config, (winning) the keys pinned in `$peers`, and (winning
    again) each node's key chain from its signed rotations in the `@<node>` key journals."""
    keys: dict[str, VerifyKey] = {config.node.name: key.verify_key}
    for peer in config.peers:
        if peer.public_key:
            keys[peer.name] = verify_key_from_multibase(peer.public_key)
    history = KeyHistory()
    if store is not None:
        keys.update({k: v for k, v in pinned_keys(store).items() if k != config.node.name})
        for stream in store.heads():
            if stream.startswith(KEY_JOURNAL_PREFIX):
                for envelope in store.iter_stream(stream):
                    history.apply(envelope)
    cache: ChainCache = {}

    def lookup(origin: str) -> VerifyKey | KeyChain | None:
        return chain_of(history, origin, cache) or keys.get(origin)

    return lookup
