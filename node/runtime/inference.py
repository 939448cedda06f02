"""OpenAI-compatible chat completions with `stream: true`, on the routes of [inference].

Each streamed token is handed to `on_token` as it arrives (the host turns it into `token`
and AG-UI TEXT_MESSAGE_CONTENT events); the whole text is returned to the agent. Runs on the
event loop.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import aiohttp

from node.config import InferenceSection
from node.runtime.hostapi import HostError

ROUTES = ("local", "cloud")


def parse_request(text: str, default_route: str) -> tuple[str, str, int | None]:
    """(route, prompt, max_tokens) from the agent's JSON request, or HostError."""
    try:
        request = json.loads(text)
    except ValueError:
        raise HostError("failed", "inference request is not JSON") from None
    if not isinstance(request, dict) or not isinstance(request.get("prompt"), str):
        raise HostError("failed", "inference request needs a string `prompt`")
    route = request.get("route") or default_route
    if route not in ROUTES:
        raise HostError("failed", f"unknown inference route {route!r} (local or cloud)")
    max_tokens = request.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens <= 0):
        raise HostError("failed", "`max_tokens` must be a positive integer")
    return route, request["prompt"], max_tokens


class InferenceClient:
    def __init__(self, session: aiohttp.ClientSession, config: InferenceSection) -> None:
        self.session = session
        self.config = config

    def endpoint(self, route: str) -> tuple[str, str, dict[str, str]]:
        """(url, model, headers) of a route, or HostError when it is not configured."""
        c = self.config
        base = c.local_url if route == "local" else c.cloud_url
        if not base:
            raise HostError("failed", f"inference route {route} is not configured")
        headers = {"Accept": "text/event-stream"}
        if route == "cloud" and c.cloud_api_key_env:
            key = os.environ.get(c.cloud_api_key_env)
            if key:
                headers["Authorization"] = f"Bearer {key}"
        model = c.local_model if route == "local" else c.cloud_model
        return base.rstrip("/") + "/chat/completions", model, headers

    async def complete(
        self, route: str, prompt: str, max_tokens: int | None, on_token: Callable[[str], None]
    ) -> str:
        url, model, headers = self.endpoint(route)
        body: dict[str, Any] = {
            "model": model,
            "stream": True,
            "messages": [{"role": "user", "content": prompt}],
        }
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        parts: list[str] = []
        try:
            async with self.session.post(
                url,
                json=body,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self.config.timeout_secs),
            ) as response:
                if response.status >= 400:
                    text = (await response.content.read(500)).decode("utf-8", "replace")
                    raise HostError(
                        "failed", f"inference {route} answered {response.status}: {text}"
                    )
                async for raw in response.content:
                    token = _token_of(raw.decode("utf-8", "replace").strip())
                    if token is None:
                        continue
                    if token is _DONE:
                        break
                    parts.append(token)
                    on_token(token)
        except (TimeoutError, aiohttp.ClientError) as e:
            raise HostError("failed", f"inference {route} failed: {type(e).__name__}") from e
        return "".join(parts)


_DONE = "\0done"


def _token_of(line: str) -> str | None:
    """The content delta of one SSE line of a chat completion stream (None: nothing)."""
    if not line.startswith("data:"):
        return None
    data = line[5:].strip()
    if data == "[DONE]":
        return _DONE
    try:
        chunk = json.loads(data)
        content = chunk["choices"][0].get("delta", {}).get("content")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None
    return content if isinstance(content, str) and content else None
