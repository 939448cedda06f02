"""Whose key verifies whose envelopes: our own, and each peer's key pinned on first contact.

A peer's key comes from `[[peers]] public_key` or, if absent, from its `/.well-known/did.json`
(verificationMethod[0].publicKeyMultibase). The first key seen is pinned in `$peers`; a different
key later (from either source) is refused and reported as a critical finding, so envelopes
signed by it never verify and the journal history stays verifiable with the pinned key.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterable

import aiohttp
from nacl.signing import VerifyKey

from eventstore.keychain import KeyChain, RetiredKey
from eventstore.keys import verify_key_from_multibase
from eventstore.store import EventStore
from node.config.model import Peer
from node.context import NodeContext
from node.sync.incidents import Incidents
from node.sync.wire import MAX_DID_BYTES, read_capped
from projections import catalogue as c
from projections.keys import KeyHistory
from projections.peers import PEERS_STREAM, PeerBook

log = logging.getLogger("agent-node.sync")
ChainCache = dict[str, tuple[int, KeyChain]]
DID_PATH = "/.well-known/did.json"
DID_RETRY_SECS = 2.0
MAX_DID_METHODS = 64  # a hostile peer's DID document is read this far


class PeerKeys:
    def __init__(
        self, ctx: NodeContext, incidents: Incidents, http: aiohttp.ClientSession | None
    ) -> None:
        self._ctx = ctx
        self._book: PeerBook = ctx.projections.get(PeerBook)
        self._incidents = incidents
        self.http = http
        self._peers = {p.name: p for p in ctx.config.peers}
        self._decoded: dict[str, VerifyKey] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._fetching: dict[str, asyncio.Lock] = {}
        self._tried_at: dict[str, float] = {}
        self._chains: ChainCache = {}

    def lookup(self, origin: str) -> VerifyKey | KeyChain | None:
        """The key for `origin` (its KeyChain once it rotated keys); safe to call from the
        store's verification thread."""
        chain = chain_of(self._ctx.projections.get(KeyHistory), origin, self._chains)
        if chain is not None:
            return chain
        if origin == self._ctx.name:
            return self._ctx.key.verify_key
        text = self._book.pins.get(origin)
        if text is None:
            return None
        key = self._decoded.get(text)
        if key is None:
            key = self._decoded[text] = verify_key_from_multibase(text)
        return key

    async def pin_configured(self) -> None:
        """At start: pin every key the config gives (or report that it differs from the pin)."""
        for peer in self._peers.values():
            if peer.public_key:
                await self.offer(peer.name, peer.public_key, "config")

    async def offer(
        self, peer: str, key_text: str, source: str, retired: frozenset[str] = frozenset()
    ) -> bool:
        """Pin `key_text` if `peer` has no pin yet; True when it is (now) the pinned key, or
        the peer's current key by its signed rotations. `retired`: keys the peer's DID document
        lists as no longer current (a rotation it announces)."""
        current = self._ctx.projections.get(KeyHistory).current(peer)
        if current is not None and key_text == current:
            return True
        async with self._lock(peer):
            pinned = self._book.pins.get(peer)
            if pinned is None:
                verify_key_from_multibase(key_text)  # ValueError: not an ed25519 multibase key
                await self._ctx.store.append(
                    PEERS_STREAM,
                    *c.event_of(c.PeerKeyPinned(peer=peer, public_key=key_text, source=source)),
                )
                log.info("pinned the key of peer %s from %s: %s", peer, source, key_text)
                return True
        if pinned == key_text:
            return True
        if (current or pinned) in retired:
            # announced, not yet proven: the signed node.key_rotated event is on its way (the
            # peer pushes its key journal); until it lands, envelopes signed by the new key are
            # rejected and retried, and nothing is reported
            log.info(
                "peer %s announces a key rotation to %s; awaiting its signed event", peer, key_text
            )
            return False
        await self._incidents.report(
            f"key-changed/{peer}/{key_text}",
            "critical",
            f"peer {peer} presents a different public key; refused",
            f"pinned {pinned}, {source} now says {key_text}. Envelopes signed with the new key "
            "are rejected. If the peer really changed its key, its old journals no longer "
            "verify: see docs/mesh.md.",
        )
        return False

    async def ensure(self, origins: Iterable[str]) -> None:
        """First contact from the receiving side: fetch keys of configured peers we lack."""
        for origin in origins:
            if self.lookup(origin) is None and origin in self._peers:
                await self.check_did(self._peers[origin], retry_after=DID_RETRY_SECS)

    async def check_did(self, peer: Peer, retry_after: float = 0.0) -> None:
        """Read the peer's DID document; pin its key, or report that it changed.

        With `retry_after` (the receiving side, on every push from an origin without a key), a
        key pinned meanwhile, or a look-up from this side less than that many seconds ago,
        means no new request.
        """
        async with self._fetching.setdefault(peer.name, asyncio.Lock()):
            if retry_after and self.lookup(peer.name) is not None:
                return
            if retry_after:
                now = time.monotonic()
                if now - self._tried_at.get(peer.name, -1e9) < retry_after:
                    return
                self._tried_at[peer.name] = now
            found = await fetch_did_keys(self.http, peer.url)
            if found is None:
                return
            key_text, retired = found
            try:
                await self.offer(peer.name, key_text, "did", retired)
            except ValueError as exc:
                log.warning("peer %s publishes an unusable key %r: %s", peer.name, key_text, exc)

    def _lock(self, peer: str) -> asyncio.Lock:
        return self._locks.setdefault(peer, asyncio.Lock())


async def fetch_did_keys(
    http: aiohttp.ClientSession | None, base_url: str
) -> tuple[str, frozenset[str]] | None:
    """A node's DID document: verificationMethod[0].publicKeyMultibase (its current key) and
    the keys of the methods marked `revoked` (retired by rotation), or None."""
    if http is None:
        return None
    try:
        async with http.get(base_url.rstrip("/") + DID_PATH) as response:
            if response.status != 200:
                return None
            doc = json.loads(await read_capped(response, MAX_DID_BYTES))
        methods = doc["verificationMethod"][:MAX_DID_METHODS]
        key = methods[0]["publicKeyMultibase"]
        retired = frozenset(
            m["publicKeyMultibase"]
            for m in methods[1:]
            if isinstance(m, dict)
            and m.get("revoked")
            and isinstance(m.get("publicKeyMultibase"), str)
        )
    except (
        TimeoutError,
        aiohttp.ClientError,
        ValueError,
        KeyError,
        IndexError,
        TypeError,
        RecursionError,
    ):
        return None
    return (key, retired) if isinstance(key, str) else None


def pinned_keys(store: EventStore) -> dict[str, VerifyKey]:
    """Pinned peer keys read from `$peers` (for offline tools such as `audit verify`)."""
    book = PeerBook()
    for envelope in store.iter_stream(PEERS_STREAM):
        book.apply(envelope)
    keys: dict[str, VerifyKey] = {}
    for peer, text in book.pins.items():
        try:
            keys[peer] = verify_key_from_multibase(text)
        except ValueError:
            continue
    return keys


def chain_of(history: KeyHistory, node: str, cache: ChainCache) -> KeyChain | None:
    """The node's KeyChain once it has rotated, decoded once per rotation; else None."""
    rotations = history.rotations.get(node)
    if not rotations:
        return None
    cached = cache.get(node)
    if cached is not None and cached[0] == len(rotations):
        return cached[1]
    chain = KeyChain(
        [RetiredKey(verify_key_from_multibase(r.previous_public_key), r.heads) for r in rotations],
        verify_key_from_multibase(rotations[-1].new_public_key),
    )
    cache[node] = (len(rotations), chain)
    return chain
