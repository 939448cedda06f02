"""Fill a gap the stream cannot (its messages aged out, or were lost) over HTTP, from any peer.

Envelopes are verified by their origin's pinned key, so who delivers them does not matter:
the journal's home, or any other node holding it (relay). Each configured peer is asked in
turn, those whose reported heads (the heads bucket) show they hold the journal first, via
`GET /api/v1/sync/envelopes/pushed` (envelopes with their payload), and what it sends goes
through the same receive path as a push.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import aiohttp
import msgspec

from node.config import Peer
from node.context import NodeContext
from node.sync.nats_metrics import NatsMetrics
from node.sync.receive import Receiver
from node.sync.wire import MAX_REPLY_BYTES, read_capped
from projections.journals import Journals

log = logging.getLogger("agent-node.sync")
PULL_PATH = "/api/v1/sync/envelopes/pushed"
PAGE = 1000


class _Page(msgspec.Struct):
    envelopes: list[msgspec.Raw]


_page_decoder = msgspec.json.Decoder(_Page)


class HttpRepair:
    def __init__(
        self,
        ctx: NodeContext,
        receiver: Receiver,
        http: aiohttp.ClientSession,
        metrics: NatsMetrics,
    ) -> None:
        self._ctx = ctx
        self._receiver = receiver
        self._http = http
        self._metrics = metrics

    def head(self, journal: str) -> int:
        return self._ctx.projections.get(Journals).head.get(journal, 0)

    async def repair(
        self, journal: str, want: int, reported: Mapping[str, Mapping[str, int]] = {}
    ) -> int:
        """Pull `journal` up to `want` from the peers; how many envelopes were accepted."""
        peers = sorted(
            self._ctx.config.peers, key=lambda p: -reported.get(p.name, {}).get(journal, 0)
        )
        got = 0
        for peer in peers:
            if self.head(journal) >= want:
                break
            try:
                got += await self._pull(peer, journal, want)
            except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
                log.info("repair of %s from %s: %s", journal, peer.name, exc)
        if got:
            self._metrics.repairs.inc(got)
            log.info("repaired %s: %d envelope(s) over HTTP", journal, got)
        return got

    async def _pull(self, peer: Peer, journal: str, want: int) -> int:
        got = 0
        headers = {"Authorization": f"Bearer {peer.token}"}
        url = peer.url.rstrip("/") + PULL_PATH
        while (since := self.head(journal)) < want:
            params = {"agent": journal, "since": str(since), "limit": str(PAGE)}
            async with self._http.get(url, params=params, headers=headers) as response:
                body = await read_capped(response, MAX_REPLY_BYTES)
                if response.status != 200:
                    raise ValueError(f"HTTP {response.status}")
            try:
                page = _page_decoder.decode(body)
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
                raise ValueError(f"unexpected page: {exc}") from None
            if not page.envelopes:
                return got
            outcome = await self._receiver.receive(peer.name, page.envelopes)
            got += outcome.accepted
            if outcome.accepted == 0:
                return got
        return got
