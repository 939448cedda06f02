"""How far each peer has each journal: learned from push replies and pulls, kept in `$peers`.

Replies come after every push batch, so acks are coalesced: at most one `peer.acked` event per
peer per flush interval, and only for heads that changed. After a restart the replicator
re-learns the truth from the peer's `heads` anyway; the persisted acks make the convergence
report right from the start and leave a record of what each peer confirmed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from eventstore.store import EventStore, NewEvent, StoreClosedError
from projections import catalogue as c
from projections.peers import PEERS_STREAM, PeerBook

log = logging.getLogger("agent-node.sync")


class AckRecorder:
    def __init__(self, store: EventStore, book: PeerBook, flush_secs: float) -> None:
        self._store = store
        self._book = book
        self._flush_secs = flush_secs
        self._pending: dict[str, dict[str, int]] = {}
        self._flushing: dict[str, dict[str, int]] = {}
        self._wake = asyncio.Event()

    def known(self, peer: str, stream: str) -> int | None:
        for layer in (self._pending, self._flushing):
            if stream in layer.get(peer, {}):
                return layer[peer][stream]
        return self._book.acks.get(peer, {}).get(stream)

    def note(self, peer: str, heads: Mapping[str, int], *, at_least: bool = False) -> None:
        """Record the peer's heads; `at_least` only raises them (inferred, not reported)."""
        for stream, seq in heads.items():
            current = self.known(peer, stream)
            if current == seq or (at_least and current is not None and current > seq):
                continue
            self._pending.setdefault(peer, {})[stream] = seq
            self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            await asyncio.sleep(self._flush_secs)
            self._wake.clear()
            await self.flush()

    async def flush(self) -> None:
        pending, self._pending = self._pending, {}
        if not pending:
            return
        events = [
            NewEvent(PEERS_STREAM, *c.event_of(c.PeerAcked(peer=peer, heads=heads)))
            for peer, heads in sorted(pending.items())
        ]
        self._flushing = pending
        try:
            await self._store.append_many(events)
        except StoreClosedError:
            log.debug("store closed; %d peer ack(s) not persisted", len(events))
        except Exception:  # acks are re-learned from the peers; never stop recording them
            log.exception("could not journal %d peer ack(s)", len(events))
        finally:
            self._flushing = {}
