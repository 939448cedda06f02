"""MCP sessions (Streamable HTTP's `Mcp-Session-Id`): what the node keeps of one client between
its requests, in memory, bounded.

A session is made by `initialize` and holds who opened it (the token's digest and name: another
token showing the id gets 404, as an unknown id does), the agent, the client's declared
capabilities (elicitation: node/protocols/mcp_elicit.py), its resource subscriptions, the
notifications waiting for its GET stream and the requests the node sent the client and awaits
answers to. Requests without a session id are still served, each standing alone (as before
sessions existed): only subscriptions and elicitation need one.

Bounds: `[mcp] sessions_per_token` and `sessions_max` (over either, the least recently used
session of that token, or of anyone, that has no request in flight is ended, with its GET
stream; if none can be, `initialize` is refused), `session_idle_secs` (an idle session without
a stream ends), `MAX_SUBSCRIPTIONS` URIs per session, `MAX_PENDING` notifications waiting (the
oldest are dropped: a resource update is only a hint to read again, and the same URI is never
queued twice), `REPLAY` kept for a GET stream that resumes with `Last-Event-ID`.
"""

from __future__ import annotations

import asyncio
import collections
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MAX_SUBSCRIPTIONS = 100
MAX_PENDING = 256
REPLAY = 64
MAX_ASKED = 8  # requests to the client awaiting an answer, per session
HEADER = "Mcp-Session-Id"


class SessionLimitError(Exception):
    """No session can be made for this token now (every one of its sessions is busy)."""


@dataclass(eq=False)
class McpSession:
    id: str
    token: bytes
    caller: str
    agent: str
    groups: frozenset[str]
    client_capabilities: dict[str, Any]
    last_used: float = field(default_factory=time.monotonic)
    subscriptions: set[str] = field(default_factory=set)
    # the GET stream's messages: (event id, message), the newest last
    pending: collections.deque[tuple[int, dict[str, Any]]] = field(
        default_factory=lambda: collections.deque(maxlen=MAX_PENDING)
    )
    sent: collections.deque[tuple[int, dict[str, Any]]] = field(
        default_factory=lambda: collections.deque(maxlen=REPLAY)
    )
    queued_uris: set[str] = field(default_factory=set)
    next_event: int = 1
    streams: int = 0  # open GET streams (one, but for a moment when a new one replaces it)
    generation: int = 0  # of the GET stream: the newest one serves, an older one ends
    in_flight: int = 0  # requests being answered
    asked: dict[str, asyncio.Future[dict[str, Any]]] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    on_end: list[Callable[[], None]] = field(default_factory=list)
    ended: bool = False

    @property
    def busy(self) -> bool:
        """A request of it is being answered or awaits the client: not to be ended to make room
        (an open GET stream alone is not busy: ending the session ends it, and the client can
        initialize again; a client that left without DELETE must not lock its token out)."""
        return bool(self.in_flight or self.asked)

    def can_elicit(self) -> bool:
        return isinstance(self.client_capabilities.get("elicitation"), dict)

    def touch(self) -> None:
        self.last_used = time.monotonic()

    # ---- the GET stream
    def resource_updated(self, uri: str) -> None:
        """Queue `notifications/resources/updated` for `uri` (once until it is sent)."""
        if uri not in self.subscriptions or uri in self.queued_uris:
            return
        if len(self.pending) == self.pending.maxlen:
            _, dropped = self.pending.popleft()
            self.queued_uris.discard(dropped.get("params", {}).get("uri", ""))
        self.queued_uris.add(uri)
        self._queue(
            {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": uri}}
        )

    def _queue(self, message: dict[str, Any]) -> None:
        self.pending.append((self.next_event, message))
        self.next_event += 1
        self.wake.set()

    def take(self) -> list[tuple[int, dict[str, Any]]]:
        taken = list(self.pending)
        self.pending.clear()
        self.queued_uris.clear()
        self.wake.clear()
        self.sent.extend(taken)
        return taken

    def replay_after(self, last_event: int) -> list[tuple[int, dict[str, Any]]]:
        """What a resuming stream missed, of what is kept (the newest REPLAY)."""
        return [(n, m) for n, m in self.sent if n > last_event]

    # ---- requests to the client
    def ask(self, request_id: str) -> asyncio.Future[dict[str, Any]]:
        if len(self.asked) >= MAX_ASKED:
            raise SessionLimitError(f"{MAX_ASKED} requests to this client await answers")
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.asked[request_id] = future
        return future

    def answered(self, message: dict[str, Any]) -> bool:
        """A JSON-RPC response from the client to one of our requests: False if none waits."""
        request_id = message.get("id")
        future = self.asked.pop(request_id, None) if isinstance(request_id, str) else None
        if future is None:
            return False
        if not future.done():
            future.set_result(message)
        return True

    def end(self) -> None:
        self.ended = True
        for future in self.asked.values():
            if not future.done():
                future.cancel()
        self.asked.clear()
        self.wake.set()
        for hook in self.on_end:
            hook()
        self.on_end.clear()


class McpSessions:
    def __init__(self, per_token: int, total: int, idle_secs: float) -> None:
        self.per_token = per_token
        self.total = total
        self.idle_secs = idle_secs
        self._sessions: dict[str, McpSession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def create(
        self,
        token: bytes,
        caller: str,
        agent: str,
        groups: frozenset[str],
        capabilities: dict[str, Any],
    ) -> McpSession:
        self._sweep()
        mine = [s for s in self._sessions.values() if s.token == token]
        if len(mine) >= self.per_token:
            self._evict(mine, f"token {caller!r} holds {self.per_token} MCP sessions")
        if len(self._sessions) >= self.total:
            self._evict(list(self._sessions.values()), f"the node holds {self.total} sessions")
        session = McpSession(secrets.token_urlsafe(24), token, caller, agent, groups, capabilities)
        self._sessions[session.id] = session
        return session

    def _evict(self, among: list[McpSession], why: str) -> None:
        idle = [s for s in among if not s.busy]
        if not idle:
            raise SessionLimitError(
                f"{why} ([mcp] sessions_per_token, sessions_max), each with a request in "
                "flight: end one (DELETE with its Mcp-Session-Id) or retry later"
            )
        self.end(min(idle, key=lambda s: s.last_used).id)

    def _sweep(self) -> None:
        deadline = time.monotonic() - self.idle_secs
        for session in [s for s in self._sessions.values() if s.last_used < deadline]:
            if not session.busy:
                self.end(session.id)

    def get(self, session_id: str, token: bytes, agent: str) -> McpSession | None:
        """The session, if this token opened it for this agent (else None: 404)."""
        session = self._sessions.get(session_id)
        if (
            session is None
            or session.agent != agent
            or not hmac.compare_digest(session.token, token)
        ):
            return None
        session.touch()
        return session

    def end(self, session_id: str) -> bool:
        session = self._sessions.pop(session_id, None)
        if session is None:
            return False
        session.end()
        return True

    def close(self) -> None:
        for session_id in list(self._sessions):
            self.end(session_id)
