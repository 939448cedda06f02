"""What both providers' adapters share: the streamed request (`post_streamed`), the answer
they build, the deltas they report as tokens arrive, their errors, and the bounded reading
of a server-sent event stream.

A server that misbehaves gets a clean error, never a partial success: an SSE line longer than
MAX_LINE, more than MAX_TEXT of text and arguments, or a wait for the next line past its
deadline (`timeout_secs` for each next piece; nothing past the call's own deadline).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
from aiohttp.http_exceptions import LineTooLong

from node.inference.models import Model
from node.runtime.hostapi import HostError
from node.web import boundedjson

MAX_LINE = 1 << 20  # one SSE line of the stream
MAX_TEXT = 4 << 20  # the text and tool-call arguments of one answer
MAX_TOOL_CALLS = 128
MAX_RETRY_AFTER = 600.0


class Deltas(Protocol):
    """Who hears the answer as it streams (the host: SSE `token`, AG-UI events)."""

    def text(self, token: str) -> None: ...

    def tool_call(self, call_id: str, name: str) -> None: ...

    def tool_arguments(self, call_id: str, delta: str) -> None: ...


class ProviderError(HostError):
    """A provider's refusal or failure; `retry_after` when it asked to be tried later (a 429
    or 503 with Retry-After), `status` its HTTP status when it answered one."""

    def __init__(self, message: str, status: int | None = None, retry_after: float | None = None):
        super().__init__("failed", message)
        self.status = status
        self.retry_after = retry_after


@dataclass
class Completion:
    """The assistant's answer in OpenAI's chat shape, with what the provider counted; each
    piece added is reported to `deltas` as it comes (the streams see what the answer holds)."""

    model: str = ""  # as the provider names the model that answered
    where: str = ""  # "inference <alias>", for errors
    deltas: Deltas | None = field(default=None, repr=False, compare=False)
    content: list[str] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    size: int = 0
    first_token_at: float | None = None  # monotonic

    def add_text(self, token: str) -> None:
        self._grow(len(token))
        self.content.append(token)
        if self.deltas is not None:
            self.deltas.text(token)

    def _grow(self, n: int) -> None:
        if self.first_token_at is None:
            self.first_token_at = time.monotonic()
        self.size += n
        if self.size > MAX_TEXT:
            raise ProviderError(f"{self.where} sent over {MAX_TEXT} characters")

    def start_call(self, call_id: str, name: str) -> dict[str, Any]:
        if len(self.tool_calls) >= MAX_TOOL_CALLS:
            raise ProviderError(f"{self.where} sent over {MAX_TOOL_CALLS} tool calls")
        call_id, name = call_id[:200], name[:200]
        self._grow(len(name))
        call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        self.tool_calls.append(call)
        if self.deltas is not None:
            self.deltas.tool_call(call_id, name)
        return call

    def add_arguments(self, call: dict[str, Any], delta: str) -> None:
        self._grow(len(delta))
        call["function"]["arguments"] += delta
        if self.deltas is not None:
            self.deltas.tool_arguments(call["id"], delta)

    @property
    def text(self) -> str:
        return "".join(self.content)

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        return message


def retry_after_of(headers: Any) -> float | None:
    """Retry-After in seconds (the delta-seconds form; a date is not trusted), or None."""
    raw = str(headers.get("Retry-After", "")).strip()
    if not raw.isascii() or not raw.replace(".", "", 1).isdigit():
        return None
    return min(float(raw), MAX_RETRY_AFTER)


async def refusal(response: aiohttp.ClientResponse, where: str) -> ProviderError:
    """The error of an answer >= 400: its status and the start of its body (never a header:
    some echo the key)."""
    text = (await response.content.read(500)).decode("utf-8", "replace")
    retry = retry_after_of(response.headers) if response.status in (429, 503) else None
    if response.status in (429, 503) and retry is None:
        retry = 1.0
    return ProviderError(f"{where} answered {response.status}: {text}", response.status, retry)


async def data_lines(
    response: aiohttp.ClientResponse, where: str, idle_secs: float
) -> AsyncIterator[str]:
    """The `data:` payloads of an SSE stream, each within `idle_secs` of the last (the
    session's sock_read); ends at the end of the body. The call's own deadline is the caller's."""
    while True:
        try:
            raw = await response.content.readuntil(b"\n")
        except TimeoutError:
            raise ProviderError(f"{where} failed: {idle_error(idle_secs)}") from None
        except (LineTooLong, ValueError) as e:  # aiohttp: a line past its buffer limit
            raise ProviderError(f"{where} sent an over-long line: {e}") from e
        except aiohttp.ClientError as e:
            raise ProviderError(f"{where} failed: {type(e).__name__}") from e
        if not raw:
            return
        if len(raw) > MAX_LINE:
            raise ProviderError(f"{where} sent a line over {MAX_LINE} bytes")
        line = raw.decode("utf-8", "replace").strip()
        if line.startswith("data:"):
            yield line[5:].strip()


async def post_streamed(
    session: aiohttp.ClientSession,
    model: Model,
    path: str,
    headers: dict[str, str],
    body: dict[str, Any],
    on_data: Callable[[str], bool],
) -> None:
    """POST `body` to the model's `path` and hand each `data:` payload of the answer's stream
    to `on_data` until it says that was the last (True) or the body ends. An answer >= 300, a
    failed connection and a wait past the model's `timeout_secs` are ProviderErrors (never a
    redirect followed: the key would go along)."""
    where = f"inference {model.alias}"
    try:
        async with session.post(
            model.base_url.rstrip("/") + path,
            json=body,
            headers={"Accept": "text/event-stream", **headers},
            timeout=timeout_of(model.timeout_secs),
            read_bufsize=MAX_LINE // 2,
            allow_redirects=False,
        ) as response:
            if response.status >= 300:
                raise await refusal(response, where)
            async for data in data_lines(response, where, model.timeout_secs):
                if on_data(data):
                    return
    except aiohttp.ClientError as e:
        raise ProviderError(f"{where} failed: {type(e).__name__}") from e
    except TimeoutError as e:  # the response's headers (sock_read)
        raise ProviderError(f"{where} failed: {idle_error(model.timeout_secs)}") from e


def idle_error(idle_secs: float) -> str:
    return f"TimeoutError (no data for {idle_secs} s)"


def timeout_of(idle_secs: float) -> aiohttp.ClientTimeout:
    """No total (a long generation is fine while tokens flow): the wait for the connection,
    the response and each next piece of the stream."""
    return aiohttp.ClientTimeout(total=None, sock_connect=idle_secs, sock_read=idle_secs)


def json_chunk(data: str, where: str) -> dict[str, Any] | None:
    try:
        chunk = boundedjson.loads(data)
    except ValueError:
        raise ProviderError(f"{where} sent a chunk that is not JSON") from None
    return chunk if isinstance(chunk, dict) else None


def error_in(chunk: dict[str, Any], where: str) -> None:
    """An error the server reports inside the stream (both providers say `error`)."""
    error = chunk.get("error")
    if error is not None:
        message = error.get("message") if isinstance(error, dict) else error
        raise ProviderError(f"{where} reported an error: {str(message)[:500]}")


def obj(value: Any) -> dict[str, Any]:
    """A JSON object a provider sent, or an empty one for anything else."""
    return value if isinstance(value, dict) else {}


def count(value: Any) -> int:
    """A token count a provider reported, or 0 when it is not a sane one."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 40:
        return 0
    return int(value)


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))
