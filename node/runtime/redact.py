"""Keeps secret values that agents have read out of everything journaled or emitted for them.

The journal is immutable, readable with the `read` scope, streamed and replicated to every
peer, so a secret that reaches it is out for good. An agent that puts a value it got from
`get-secret` into a log line, a finding, a fetch URL or header, an approval request, task
output or an error gets `[secret:<domain>/<key>]` written in its place. Values are matched as
they are and in their JSON-escaped forms (an agent's request is JSON text). This stops
accidents and prompt-injected leaks, not an agent that encodes the value on purpose.
"""

from __future__ import annotations

import json
import threading
from typing import Any


def marker(domain: str, key: str) -> str:
    return f"[secret:{domain}/{key}]"


class SecretRedactor:
    """Thread-safe: agents' worker threads learn values, any thread redacts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._markers: dict[str, str] = {}  # a form of a value → its marker
        self._order: list[str] = []  # forms, longest first, so no marker is cut into

    def learn(self, domain: str, key: str, value: str) -> None:
        """Remember a value an agent was given (its raw and JSON-escaped forms)."""
        if not value:
            return
        forms = {value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}
        with self._lock:
            for form in forms:
                self._markers.setdefault(form, marker(domain, key))
            self._order = sorted(self._markers, key=len, reverse=True)

    def text(self, text: str) -> str:
        order = self._order  # a snapshot: learn() replaces the list, never mutates it
        if not order:
            return text
        for form in order:
            if form in text:
                text = text.replace(form, self._markers[form])
        return text

    def value(self, value: Any) -> Any:
        """`value` with every string in it (keys too) redacted; containers are copied."""
        if not self._order:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(str(k)): self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value
