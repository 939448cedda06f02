"""Requests and tokens per minute, per agent (`[inference] requests_per_minute`,
`tokens_per_minute`): a sliding window of the last 60 s of calls.

A call that would pass a limit waits for the window to make room when that comes before the
run's deadline, and is refused at once otherwise (it would hold the agent for nothing). Runs on
the event loop: the check and the entry happen with nothing awaited between them.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from node.runtime.hostapi import HostError

WINDOW_SECS = 60.0


class LimitRefusal(HostError):
    """A call refused before any provider was asked: a rate limit (or a budget)."""

    def __init__(self, message: str) -> None:
        super().__init__("failed", message)


@dataclass
class _Window:
    calls: deque[float] = field(default_factory=deque)  # when each call began
    tokens: deque[tuple[float, int]] = field(default_factory=deque)  # (when, tokens counted)

    def expire(self, now: float) -> None:
        while self.calls and self.calls[0] <= now - WINDOW_SECS:
            self.calls.popleft()
        while self.tokens and self.tokens[0][0] <= now - WINDOW_SECS:
            self.tokens.popleft()


class RateLimits:
    def __init__(self, requests_per_minute: int, tokens_per_minute: int) -> None:
        self.rpm = requests_per_minute
        self.tpm = tokens_per_minute
        self._windows: dict[str, _Window] = {}

    def wait_for(self, agent: str, tokens: int, now: float | None = None) -> tuple[float, str]:
        """(seconds until a call of about `tokens` fits, the limit it waits for); (0, "") when
        it fits now."""
        now = time.monotonic() if now is None else now
        window = self._windows.setdefault(agent, _Window())
        window.expire(now)
        waits: list[tuple[float, str]] = []
        if self.rpm and len(window.calls) >= self.rpm:
            oldest = window.calls[len(window.calls) - self.rpm]
            waits.append((oldest + WINDOW_SECS - now, f"{self.rpm} requests per minute"))
        if self.tpm:
            used = sum(n for _, n in window.tokens)
            if used and used + tokens > self.tpm:
                freed, at = used, now
                for when, n in window.tokens:  # until enough has left the window
                    freed -= n
                    at = when
                    if freed + tokens <= self.tpm:
                        break
                waits.append((at + WINDOW_SECS - now, f"{self.tpm} tokens per minute"))
        return max(waits) if waits else (0.0, "")

    def begin(self, agent: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self._windows.setdefault(agent, _Window()).calls.append(now)

    def spent(self, agent: str, tokens: int, now: float | None = None) -> None:
        if tokens:
            now = time.monotonic() if now is None else now
            self._windows.setdefault(agent, _Window()).tokens.append((now, tokens))
