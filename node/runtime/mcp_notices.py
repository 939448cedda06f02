"""MCP notifications of one `tools/call`: what the agent logs and the progress it reports while
the call runs, carried from its worker thread to the call's SSE answer (node/api/mcp.py).

Logs come from the agent's own `log` host calls (and its stdout/stderr lines), the same lines
the journal gets, redacted alike; progress from `task-progress("", ...)` during the call. Both
are bounded per call in count and bytes: past the bound they are dropped and counted, and the
answer says how many (a tool that logs in a loop must not fill the node's memory while its
client reads slowly).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
from typing import Any

# MCP's syslog levels, least severe first, and the agent's levels as MCP names them
MCP_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
AGENT_LEVELS = {"trace": "debug", "debug": "debug", "info": "info", "warn": "warning"}
DEFAULT_LEVEL = "info"
MAX_NOTICES = 1000  # per call
MAX_NOTICE_BYTES = 1 << 20  # per call, of log text


def mcp_level(agent_level: str) -> str:
    return AGENT_LEVELS.get(agent_level, "error")


def progress_params(value: Any) -> dict[str, Any] | None:
    """MCP progress from an agent's report {progress, total?, message?}: None when it is not
    one (progress must be a finite number)."""
    if not isinstance(value, dict):
        return None
    params = {k: value[k] for k in ("progress", "total") if _number(value.get(k))}
    if "progress" not in params:
        return None
    if isinstance(value.get("message"), str):
        params["message"] = value["message"][:4096]
    return params


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class CallNotices:
    """Filled from the agent's worker thread (`log`, `progress`), drained on the event loop
    (`wait`, `take`). `progress_token` is the request's `_meta.progressToken` (None: the client
    asked for no progress); logs below `min_level` are not sent."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        agent: str,
        min_level: str,
        progress_token: str | int | None,
    ) -> None:
        self.loop = loop
        self.agent = agent
        self.min_rank = MCP_LEVELS.index(min_level)
        self.progress_token = progress_token
        self._pending: collections.deque[dict[str, Any]] = collections.deque()
        self._ready = asyncio.Event()
        self._count = 0
        self._bytes = 0
        self.dropped = 0

    # ---- the worker thread
    def log(self, level: str, message: str) -> None:
        mcp = mcp_level(level)
        if MCP_LEVELS.index(mcp) < self.min_rank:
            return
        params = {"level": mcp, "logger": self.agent, "data": message}
        self._add("notifications/message", params, len(message))

    def progress(self, value: Any) -> bool:
        """False when `value` is no progress report (the host tells the agent so)."""
        params = progress_params(value)
        if params is None:
            return False
        if self.progress_token is not None:
            self._add("notifications/progress", {"progressToken": self.progress_token, **params})
        return True

    def _add(self, method: str, params: dict[str, Any], size: int = 0) -> None:
        if self._count >= MAX_NOTICES or self._bytes + size > MAX_NOTICE_BYTES:
            self.dropped += 1
            return
        self._count += 1
        self._bytes += size
        notice = {"jsonrpc": "2.0", "method": method, "params": params}
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody reads any more
            self.loop.call_soon_threadsafe(self._put, notice)

    # ---- the event loop
    def _put(self, notice: dict[str, Any]) -> None:
        self._pending.append(notice)
        self._ready.set()

    def send(self, message: dict[str, Any]) -> None:
        """A message of the node's own for the call's stream (a request to the client: an
        approval asked as an elicitation); on the event loop, not counted in the bounds."""
        self._put(message)

    async def wait(self, timeout: float) -> None:
        """Until a notice is ready or `timeout` passes."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), timeout)

    def take(self) -> list[dict[str, Any]]:
        taken = list(self._pending)
        self._pending.clear()
        self._ready.clear()
        return taken

    def dropped_notice(self) -> dict[str, Any] | None:
        """One last log line saying how many were left out, if any were."""
        if not self.dropped:
            return None
        text = f"{self.dropped} log or progress notification(s) of this call were not sent"
        params = {"level": "warning", "logger": self.agent, "data": text}
        return {"jsonrpc": "2.0", "method": "notifications/message", "params": params}
