"""Pull one journal from one peer over HTTP, to fill a gap the stream cannot (aged out, lost).

Envelopes are verified by their origin's pinned key, so who delivers them does not matter: the
journal's home or any other node holding it (relay). `GET /api/v1/sync/envelopes/pushed`
(envelopes with their payload) a page at a time, each request under its own short deadline
(`[mesh] repair_timeout_secs`): a peer that accepts and never answers costs that long, never
more. What it sends goes through the same receive path as a push. Which peer is asked for which
journal, and when, is the repair queue's business (nats/repair_queue.py).
"""

from __future__ import annotations

import logging

import aiohttp
import msgspec

from node.config.model import Peer
from node.context import NodeContext
from node.sync.rules.receiver import Receiver
from node.sync.wire import MAX_REPLY_BYTES, read_capped
from projections.journals import Journals

log = logging.getLogger("agent-node.sync")
PULL_PATH = "/api/v1/sync/envelopes/pushed"
PAGE = 1000
PAGES_PER_TURN = 10  # then the peer's other journals get their turn
CONNECT_SECS = 2.0  # a connection not made by then: the peer is unreachable (down, black-holed)
UNREACHABLE = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)


class _Page(msgspec.Struct):
    envelopes: list[msgspec.Raw]


_page_decoder = msgspec.json.Decoder(_Page)


class HttpRepair:
    def __init__(self, ctx: NodeContext, receiver: Receiver, http: aiohttp.ClientSession) -> None:
        self._ctx = ctx
        self._receiver = receiver
        self._http = http
        deadline = ctx.config.mesh.repair_timeout_secs
        self._timeout = aiohttp.ClientTimeout(
            total=deadline, sock_connect=min(deadline, CONNECT_SECS)
        )

    def head(self, journal: str) -> int:
        return self._ctx.projections.get(Journals).head.get(journal, 0)

    async def pull(self, peer: Peer, journal: str, want: int) -> int:
        """Pull `journal` from `peer` towards `want`, at most PAGES_PER_TURN pages; how many
        envelopes were accepted. Raises (aiohttp.ClientError, TimeoutError, OSError,
        ValueError) when the peer fails, or does not answer within the deadline."""
        got = 0
        headers = {"Authorization": f"Bearer {peer.token}"}
        url = peer.url.rstrip("/") + PULL_PATH
        for _ in range(PAGES_PER_TURN):
            since = self.head(journal)
            if since >= want:
                break
            params = {"agent": journal, "since": str(since), "limit": str(PAGE)}
            async with self._http.get(
                url, params=params, headers=headers, timeout=self._timeout
            ) as response:
                body = await read_capped(response, MAX_REPLY_BYTES)
                if response.status != 200:
                    raise ValueError(f"HTTP {response.status}")
            try:
                page = _page_decoder.decode(body)
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
                raise ValueError(f"unexpected page: {exc}") from None
            if not page.envelopes:
                break
            outcome = await self._receiver.receive(peer.name, page.envelopes)
            got += outcome.accepted
            if outcome.accepted == 0:
                break
        return got
