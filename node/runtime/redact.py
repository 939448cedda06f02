"""Keeps secret values that agents have read out of everything journaled or emitted for them.

The journal is immutable, readable with the `read` scope, streamed and replicated to every
peer, so a secret that reaches it is out for good. An agent that puts a value it got from
`get-secret` into a log line, a finding, a fetch URL or header, an approval request, task
output or an error gets `[secret:<domain>/<key>]` written in its place. Values are matched as
they are and in their JSON-escaped forms (an agent's request is JSON text). This stops
accidents and prompt-injected leaks, not an agent that encodes the value on purpose.

Cheap when nothing matches (nearly always): one regex search over the event's JSON encoding
(JSON escapes character by character, so a value inside any string of the event shows up
there in its escaped form); only an event that holds a value is walked and rewritten.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

import msgspec


def marker(domain: str, key: str) -> str:
    return f"[secret:{domain}/{key}]"


class SecretRedactor:
    """Thread-safe: agents' worker threads learn values, any thread redacts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._markers: dict[str, str] = {}  # a form of a value → its marker
        self._pattern: re.Pattern[str] | None = None  # every form, longest first

    def learn(self, domain: str, key: str, value: str) -> None:
        """Remember a value an agent was given (its raw and JSON-escaped forms)."""
        if not value:
            return
        forms = {
            value,
            json.dumps(value)[1:-1],
            json.dumps(value, ensure_ascii=False)[1:-1],
            msgspec.json.encode(value).decode()[1:-1],  # how events are encoded
        }
        with self._lock:
            if all(form in self._markers for form in forms):
                return
            for form in forms:
                self._markers.setdefault(form, marker(domain, key))
            ordered = sorted(self._markers, key=len, reverse=True)
            self._pattern = re.compile("|".join(re.escape(form) for form in ordered))

    def text(self, text: str) -> str:
        pattern = self._pattern  # a snapshot: learn() replaces it, never mutates it
        if pattern is None or pattern.search(text) is None:
            return text
        return pattern.sub(lambda m: self._markers[m.group(0)], text)

    def value(self, value: Any) -> Any:
        """`value` with every string in it (keys too) redacted; containers are copied only
        when something in them is."""
        pattern = self._pattern
        if pattern is None:
            return value
        try:
            encoded = msgspec.json.encode(value).decode()
        except (TypeError, OverflowError, ValueError):
            encoded = None  # not plain JSON data: walk it
        if encoded is not None and pattern.search(encoded) is None:
            return value
        return self._walk(value)

    def _walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(str(k)): self._walk(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._walk(v) for v in value]
        return value
