"""Requests one token may have in flight at once, streams aside (`[node] requests_per_token`),
and registry uploads (`[node] uploads_per_token`): past either, a 429 with `Retry-After`.

Streams have their caps (node/streams/slots.py); everything else a token asks for holds memory
(a page of up to `page_max_kb`, a body being read) until the client has read the answer: 100
calls of one read token that never read pinned 1.4 GB (issue 45). So a request is counted from
the front door (once its token is known) until its response is written, or until it becomes a
stream (`StreamSlots.open` releases it). The connection's `log_access`, which aiohttp calls once
the response is finished (node/web/connections.py), releases it; under a server without that
hook (aiohttp's test server) the front door does when the handler returns.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from node.config.model import NodeSection
from node.ops.metrics import NodeMetrics
from node.web.http import Problem


class Ticket:
    """One request's (or upload's) place in a token's count; `release` is idempotent."""

    __slots__ = ("_release",)

    def __init__(self, release: Callable[[], None]) -> None:
        self._release: Callable[[], None] | None = release

    def release(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()


class PerToken:
    """How many of something each token has at once, and the limit."""

    def __init__(
        self, limit: int, what: str, key: str, refused: Callable[[], None] | None = None
    ) -> None:
        self.limit = limit
        self.what = what  # "requests in flight", "uploads"
        self.key = key  # the config key, named in the 429
        self.counts: dict[bytes, int] = {}
        self._refused = refused or (lambda: None)

    def take(self, token: bytes) -> Ticket:
        """A place for `token`, or a 429 Problem when it has `limit` already."""
        held = self.counts.get(token, 0)
        if held >= self.limit:
            self._refused()
            raise Problem(
                429,
                f"this token has {held} {self.what} at once, the most this node allows "
                f"([node] {self.key}); retry when one is done",
                headers={"Retry-After": "1"},
            )
        self.counts[token] = held + 1
        return Ticket(lambda: self._give_back(token))

    def _give_back(self, token: bytes) -> None:
        left = self.counts[token] - 1
        if left:
            self.counts[token] = left
        else:
            del self.counts[token]


REQUESTS = web.AppKey("requests_per_token", PerToken)
UPLOADS = web.AppKey("uploads_per_token", PerToken)


def install(app: web.Application, node: NodeSection, metrics: NodeMetrics) -> None:
    """The two counts, each 429 counted in svc_http_requests_throttled_total{limit}."""
    for key, name, limit, what in (
        (REQUESTS, "requests_per_token", node.requests_per_token, "requests in flight"),
        (UPLOADS, "uploads_per_token", node.uploads_per_token, "uploads"),
    ):
        refused = metrics.requests_throttled.labels(limit=name).inc
        app[key] = PerToken(limit, what, name, refused)


TICKET: web.RequestKey[Ticket] = web.RequestKey("in_flight", Ticket)


def release_request(request: web.BaseRequest) -> None:
    """The request's answer is written, or it became a stream: its token's place is free."""
    ticket = request.get(TICKET)
    if ticket is not None:
        ticket.release()
