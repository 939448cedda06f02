"""Log output for operators: level, text or JSON lines, request ids, an opt-in access log.

Each record gets the context it happened in, where there is one: `request_id` (from a valid
`X-Request-Id` header, else generated, and echoed in the response), `agent` (the agent whose
worker thread or route it is) and `peer` (the mesh peer being pushed to, or pushing). Every
formatted line passes through a `Redactor` holding the tokens and secret values the node knows,
so a secret that slips into a message or a traceback is written as `[redacted]`.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import re
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal
from urllib.parse import unquote_plus

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.http_exceptions import HttpProcessingError

from node.config.model import Config
from node.display.humanize import visible
from node.ops import tracing
from node.ops.ids import new_id
from node.ops.logflags import ACCESS_LOGGER
from node.web.auth import identity_of

LogFormat = Literal["text", "json"]
REQUEST_ID: web.RequestKey[str] = web.RequestKey("request_id", str)
REQUEST_ID_HEADER = "X-Request-Id"
REDACTED = "[redacted]"
_VALID_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
_SENSITIVE_QUERY = re.compile(r"(?i)token|secret|password|passwd|key|auth|signature")
_MIN_SECRET = 4  # shorter values would redact ordinary words
_current_request: contextvars.ContextVar[web.Request | None] = contextvars.ContextVar(
    "current_request", default=None
)


class Redactor:
    """Replaces every known secret in formatted log text; `update` swaps the set (SIGHUP)."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._pattern: re.Pattern[str] | None = None
        self._lock = threading.Lock()
        self.update(secrets)

    def update(self, secrets: Iterable[str]) -> None:
        values = {s for s in secrets if len(s) >= _MIN_SECRET}
        # a value as it appears in JSON text too (quotes and backslashes escaped)
        values |= {s.replace("\\", "\\\\").replace('"', '\\"') for s in values}
        values |= {visible(s) for s in values}  # as a text log line shows it (escaped)
        longest_first = sorted(values, key=len, reverse=True)
        pattern = re.compile("|".join(map(re.escape, longest_first))) if values else None
        with self._lock:
            self._pattern = pattern

    def __call__(self, text: str) -> str:
        pattern = self._pattern
        return pattern.sub(REDACTED, text) if pattern is not None else text


def secrets_of(config: Config) -> list[str]:
    """Everything in a config that must never be logged: tokens, peer tokens, secret values."""
    found: list[str | None] = [t.token for t in config.auth.tokens if t.token]
    found += [p.token for p in config.peers]  # None where token_file gives it (dropped below)
    for values in config.secrets.values():
        found += [v for v in values.values() if isinstance(v, str)]
    if config.inference.cloud_api_key_env:
        found.append(os.environ.get(config.inference.cloud_api_key_env, ""))
    found += list(config.tracing.headers.values())  # a collector's key
    for model in config.inference.models.values():  # inference (issue 54)
        found.append(model.api_key)
        if model.api_key_env:
            found.append(os.environ.get(model.api_key_env, ""))
    return [s for s in found if s]


class ContextFilter(logging.Filter):
    """Adds request_id, agent and peer to a record where they apply (never None fields)."""

    def filter(self, record: logging.LogRecord) -> bool:
        request = _current_request.get()
        if request is not None:
            record.request_id = request.get(REQUEST_ID, "")
            agent = request.match_info.get("agent")
            if agent:
                record.agent = agent
            identity = identity_of(request)
            if identity is not None and request.path.startswith("/api/v1/sync/"):
                record.peer = identity.name
        trace_id = tracing.trace_id()  # "" unless [tracing] is on and a span is current
        if trace_id:
            record.trace_id = trace_id
        thread = record.threadName or ""  # None only where logging.logThreads is off
        if not hasattr(record, "agent") and thread.startswith("agent-"):
            record.agent = thread.removeprefix("agent-")
        if not hasattr(record, "peer"):
            task_name = _task_name()
            if task_name.startswith("sync-to-"):
                record.peer = task_name.removeprefix("sync-to-")
        return True


def _task_name() -> str:
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no loop in this thread
        return ""
    return task.get_name() if task is not None else ""


class _TextFormatter(logging.Formatter):
    def __init__(self, redact: Redactor) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self._redact = redact

    def formatMessage(self, record: logging.LogRecord) -> str:
        """One line whatever the message holds: a line break or an escape sequence in text a
        client, agent or peer chose shows as its escape instead of forging a line (tracebacks,
        added after this, keep their lines)."""
        return visible(super().formatMessage(record))

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        context = " ".join(
            f"{field}={getattr(record, field)}"
            for field in ("agent", "peer", "request_id", "trace_id")
            if getattr(record, field, "")
        )
        return self._redact(f"{line} [{context}]" if context else line)


def _json_formatter(redact: Redactor) -> logging.Formatter:
    """python-json-logger's formatter, redacted; imported only when JSON logs are asked for."""
    from pythonjsonlogger.json import JsonFormatter

    class RedactedJsonFormatter(JsonFormatter):
        def format(self, record: logging.LogRecord) -> str:
            return redact(super().format(record))

    return RedactedJsonFormatter(
        "{asctime}{levelname}{name}{message}",
        style="{",
        rename_fields={"asctime": "ts", "levelname": "level", "name": "logger"},
        datefmt="%Y-%m-%dT%H:%M:%S%z",
    )


def configure_logging(
    level: str = "info", fmt: LogFormat = "text", redactor: Redactor | None = None
) -> Redactor:
    """One handler on the root logger, writing to standard error."""
    redactor = redactor or Redactor()
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(ContextFilter())
    handler.setFormatter(_json_formatter(redactor) if fmt == "json" else _TextFormatter(redactor))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    return redactor


def enter_request(request: web.Request) -> tuple[str, contextvars.Token[web.Request | None]]:
    """Give the request an id (the client's, if it is a sane one) and make it the log context;
    `leave_request(token)` when it is answered. Streams prepare their response inside the
    handler: they take the header from `stream_headers`."""
    offered = request.headers.get(REQUEST_ID_HEADER, "")
    request_id = offered if _VALID_REQUEST_ID.match(offered) else new_id()
    request[REQUEST_ID] = request_id
    return request_id, _current_request.set(request)


def leave_request(token: contextvars.Token[web.Request | None]) -> None:
    _current_request.reset(token)


def stream_headers(request: web.Request, headers: Mapping[str, str]) -> dict[str, str]:
    """`headers` and the request's id, for a response the handler prepares itself."""
    request_id = request.get(REQUEST_ID)
    return {**headers, REQUEST_ID_HEADER: request_id} if request_id else dict(headers)


def safe_target(request: web.Request) -> str:
    """The request target as the client sent it (percent-encoded: a `%0d%0a` stays those six
    characters, never a line break that starts a forged log line), with the values of token-,
    key- or secret-like parameters redacted and any invisible character escaped."""
    path, has_query, query = request.raw_path.partition("?")
    if not has_query:
        return visible(path)
    parts = []
    for part in query.split("&"):
        name, has_value, _value = part.partition("=")
        sensitive = has_value and _SENSITIVE_QUERY.search(unquote_plus(name))
        parts.append(f"{name}={REDACTED}" if sensitive else part)
    return visible(f"{path}?{'&'.join(parts)}")


class AccessLogger(AbstractAccessLogger):
    """One line per request: never headers (Authorization), only who the token belongs to."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        identity = identity_of(request)  # type: ignore[arg-type]
        fields = {
            "request_id": request.get(REQUEST_ID, ""),
            "method": request.method,
            "path": safe_target(request),  # type: ignore[arg-type]
            "status": response.status,
            "bytes": response.body_length,
            "duration_ms": round(time * 1000, 2),
            "remote": request.remote or "",
            "identity": identity.name if identity else "",
        }
        self.logger.info(
            '%s "%s %s" %d %dB %.1fms %s',
            fields["remote"],
            fields["method"],
            fields["path"],
            fields["status"],
            fields["bytes"],
            fields["duration_ms"],
            fields["identity"] or "-",
            extra={k: v for k, v in fields.items() if v != ""},
        )

    @property
    def enabled(self) -> bool:
        return self.logger.isEnabledFor(logging.INFO)


MALFORMED_DETAIL = 200  # characters of the parser's complaint a warning repeats


class ProtocolLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    """aiohttp's connection logger (`aiohttp.server`), with malformed requests told apart.

    aiohttp logs a request its parser refuses (a request line over 8 KiB, a bad header, a
    stray byte) at ERROR with a traceback: anyone able to connect could fill the log with
    them. Here each is one WARNING line naming the client and what was wrong, without a
    traceback, and is counted (`count(kind)`, the `svc_http_malformed_requests` metric).
    Non-HTTP bytes on the first request (TLS to the plain port, a scanner) stay at DEBUG as
    aiohttp has them, counted too. Anything else passes through as aiohttp logs it.
    """

    def __init__(self, count: Callable[[str], None]) -> None:
        super().__init__(logging.getLogger("aiohttp.server"), {})
        self._count = count

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        refused = kwargs.get("exc_info")
        if not isinstance(refused, HttpProcessingError):
            super().log(level, msg, *args, **kwargs)
            return
        kind = type(refused).__name__
        self._count(kind)
        client = args[0] if args else "?"
        said = visible(str(refused.message))
        said = said if len(said) <= MALFORMED_DETAIL else said[:MALFORMED_DETAIL] + "…"
        self.logger.log(
            logging.DEBUG if level < logging.WARNING else logging.WARNING,
            "malformed request from %s refused with %d: %s: %s",
            client,
            refused.code,
            kind,
            said,
        )


def access_logger(enabled: bool) -> logging.Logger | None:
    return logging.getLogger(ACCESS_LOGGER) if enabled else None
