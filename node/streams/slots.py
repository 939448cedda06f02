"""Caps on open streams and journal replays, per token and in total, and the end of the
streams of a token that a reload revoked.

Every long-lived stream (the SSE endpoints, A2A's streaming methods, AG-UI runs) holds a slot
for its life, and a replay slot while it reads the journal back to a resuming client. Over a
cap the request is refused before its stream opens: 429 problem+json with Retry-After. Slots
are held under the digest of the token shown (not its name: a token rotated under the same
name is another token), so after SIGHUP `revoke_invalid` finds the streams whose token is gone
or lost the scope its route needs, and ends them.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from node.config.model import NodeSection
from node.web.auth import IDENTITY, TOKEN_DIGEST, TOKENS, TokenTable
from node.web.http import PROBLEM_TYPE
from node.web.inflight import release_request
from node.web.routes import Scopes, scopes_of

log = logging.getLogger(__name__)
# what a refused client is told to wait: a stream slot frees when some client leaves, a replay
# slot when a replay ends, and nothing predicts either
RETRY_AFTER_SECS = 5


@dataclass(eq=False, slots=True)
class StreamSlot:
    """One open stream: whose token holds it, and how to end it if that token is revoked."""

    token: bytes
    name: str
    needed: Scopes
    on_revoke: Callable[[], None] | None = None
    replaying: bool = False


class StreamSlots:
    def __init__(self, node: NodeSection) -> None:
        self.streams_max = node.sse_streams_max
        self.streams_per_token = node.sse_streams_per_token
        self.replays_max = node.sse_replays_max
        self.replays_per_token = node.sse_replays_per_token
        self._open: dict[StreamSlot, None] = {}
        self._per_token: Counter[bytes] = Counter()
        self._replays = 0
        self._replays_per_token: Counter[bytes] = Counter()
        self.revoked = 0  # streams ended by a reload, since start

    @property
    def open_count(self) -> int:
        return len(self._open)

    @property
    def replay_count(self) -> int:
        return self._replays

    def open(self, request: web.Request) -> StreamSlot:
        """A slot for the request's stream, or 429 when a cap is reached. Call it with no await
        after the token's check, or here again (a reload may have come in between)."""
        app = request.app
        token = request.get(TOKEN_DIGEST, b"")
        identity = request.get(IDENTITY)
        needed = scopes_of(app, request.match_info.route) or ()
        current = app[TOKENS].identify_digest(token) if identity is not None else None
        if identity is not None and (current is None or not current.allows(needed)):
            raise _not_valid()
        name = identity.name if identity is not None else "anonymous"
        if self._per_token[token] >= self.streams_per_token:
            raise too_many(
                f"token {name!r} already holds {self.streams_per_token} open streams "
                "(node.sse_streams_per_token); close one or retry later"
            )
        if len(self._open) >= self.streams_max:
            raise too_many(
                f"the node already serves {self.streams_max} streams (node.sse_streams_max); "
                "retry later"
            )
        slot = StreamSlot(token, name, needed)
        self._open[slot] = None
        self._per_token[token] += 1
        release_request(request)  # a stream now: counted here, not as a request in flight
        return slot

    def close(self, slot: StreamSlot) -> None:
        self.end_replay(slot)
        if slot in self._open:
            del self._open[slot]
            self._per_token[slot.token] -= 1
            if not self._per_token[slot.token]:
                del self._per_token[slot.token]

    def begin_replay(self, slot: StreamSlot) -> None:
        """A replay slot for `slot`'s stream, or 429 (before the stream opens)."""
        if slot.replaying:
            return
        if self._replays_per_token[slot.token] >= self.replays_per_token:
            raise too_many(
                f"token {slot.name!r} already replays {self.replays_per_token} journals "
                "(node.sse_replays_per_token); retry later, or connect without a last event id"
            )
        if self._replays >= self.replays_max:
            raise too_many(
                f"the node already replays {self.replays_max} journals (node.sse_replays_max); "
                "retry later, or connect without a last event id"
            )
        slot.replaying = True
        self._replays += 1
        self._replays_per_token[slot.token] += 1

    def end_replay(self, slot: StreamSlot) -> None:
        if not slot.replaying:
            return
        slot.replaying = False
        self._replays -= 1
        self._replays_per_token[slot.token] -= 1
        if not self._replays_per_token[slot.token]:
            del self._replays_per_token[slot.token]

    def revoke_invalid(self, tokens: TokenTable) -> int:
        """End the streams whose token is no longer configured, or no longer has a scope its
        route needs (after SIGHUP swapped the tokens in). Returns how many were ended."""
        ended: Counter[str] = Counter()
        for slot in tuple(self._open):
            identity = tokens.identify_digest(slot.token)
            if identity is not None and identity.allows(slot.needed):
                continue
            ended[slot.name] += 1
            self.close(slot)
            if slot.on_revoke is not None:
                try:
                    slot.on_revoke()
                except Exception:  # one stream's end must not keep the others open
                    log.exception("could not end a stream of revoked token %r", slot.name)
        if ended:
            self.revoked += sum(ended.values())
            log.warning(
                "ended the open streams of revoked tokens: %s",
                ", ".join(f"{name} ({n})" for name, n in sorted(ended.items())),
            )
        return sum(ended.values())


def too_many(detail: str) -> web.HTTPTooManyRequests:
    """A 429 problem+json with Retry-After, raised as aiohttp's own (the front door passes a
    response that already carries a problem body as it is, headers included)."""
    return web.HTTPTooManyRequests(
        text=_problem(429, "Too Many Requests", detail),
        content_type=PROBLEM_TYPE,
        headers={"Retry-After": str(RETRY_AFTER_SECS)},
    )


def _not_valid() -> web.HTTPUnauthorized:
    return web.HTTPUnauthorized(
        text=_problem(401, "Unauthorized", "the bearer token is not valid"),
        content_type=PROBLEM_TYPE,
        headers={"WWW-Authenticate": 'Bearer realm="agent-node"'},
    )


def _problem(status: int, title: str, detail: str) -> str:
    return json.dumps({"type": "about:blank", "title": title, "status": status, "detail": detail})


STREAM_SLOTS = web.AppKey("stream_slots", StreamSlots)
