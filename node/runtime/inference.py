"""OpenAI-compatible chat completions with `stream: true`, on the routes of [inference].

Each streamed token is handed to `on_token` as it arrives (the host turns it into `token`
and AG-UI TEXT_MESSAGE_CONTENT events); the whole text is returned to the agent. Runs on the
event loop.

A server that misbehaves gets a clean HostError, never a partial success: an `{"error": ...}`
chunk inside the stream, a stream that ends without `[DONE]` or a `finish_reason`, an SSE line
longer than MAX_LINE, or more than MAX_TEXT of text. There is no total timeout (a long
generation is fine while tokens flow): `timeout_secs` bounds the wait for the response and
for each next piece of the stream.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp.http_exceptions import LineTooLong

from node.config.model import InferenceSection
from node.runtime.hostapi import HostError
from node.web import boundedjson

ROUTES = ("local", "cloud")
MAX_LINE = 1 << 20  # one SSE line of the stream
MAX_TEXT = 4 << 20  # the whole generated text handed back to the agent


def parse_request(text: str, default_route: str) -> tuple[str, str, int | None]:
    """(route, prompt, max_tokens) from the agent's JSON request, or HostError."""
    try:
        request = boundedjson.loads(text)
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
        size = 0
        finished = False
        wait = self.config.timeout_secs
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=wait, sock_read=wait)
        try:
            async with self.session.post(
                url, json=body, headers=headers, timeout=timeout, read_bufsize=MAX_LINE // 2
            ) as response:
                if response.status >= 400:
                    text = (await response.content.read(500)).decode("utf-8", "replace")
                    raise HostError(
                        "failed", f"inference {route} answered {response.status}: {text}"
                    )
                while not finished:
                    raw = await response.content.readuntil(b"\n")
                    if not raw:
                        break  # the end of the body
                    if len(raw) > MAX_LINE:
                        raise HostError(
                            "failed", f"inference {route} sent a line over {MAX_LINE} bytes"
                        )
                    chunk = _chunk_of(raw.decode("utf-8", "replace").strip(), route)
                    if chunk is None:
                        continue
                    token, finished = chunk
                    if token:
                        size += len(token)
                        if size > MAX_TEXT:
                            raise HostError(
                                "failed", f"inference {route} sent over {MAX_TEXT} characters"
                            )
                        parts.append(token)
                        on_token(token)
        except (LineTooLong, ValueError) as e:  # aiohttp: a line past its buffer limit
            raise HostError("failed", f"inference {route} sent an over-long line: {e}") from e
        except (TimeoutError, aiohttp.ClientError) as e:
            raise HostError(
                "failed",
                f"inference {route} failed: {type(e).__name__} (no data for {wait} s)"
                if isinstance(e, TimeoutError)
                else f"inference {route} failed: {type(e).__name__}",
            ) from e
        if not finished:
            raise HostError("failed", f"inference {route} stream ended before it finished")
        return "".join(parts)


def _chunk_of(line: str, route: str) -> tuple[str, bool] | None:
    """(content delta, finished) of one SSE line of a chat completion stream; None when the
    line carries nothing; HostError for an error the server reports inside the stream."""
    if not line.startswith("data:"):
        return None
    data = line[5:].strip()
    if data == "[DONE]":
        return "", True
    try:
        chunk = boundedjson.loads(data)
    except ValueError:
        raise HostError("failed", f"inference {route} sent a chunk that is not JSON") from None
    if not isinstance(chunk, dict):
        return None
    if chunk.get("error") is not None:
        error = chunk["error"]
        message = error.get("message") if isinstance(error, dict) else error
        raise HostError("failed", f"inference {route} reported an error: {str(message)[:500]}")
    try:
        choice = chunk["choices"][0]
        content = (choice.get("delta") or {}).get("content")
    except (KeyError, IndexError, TypeError, AttributeError):
        return None
    token = content if isinstance(content, str) else ""
    return token, choice.get("finish_reason") is not None
