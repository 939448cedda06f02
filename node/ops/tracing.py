"""OpenTelemetry traces (docs/inference.md, "Traces"): spans for runs (tick, task, tool call),
host calls, approval waits and inference, the last with the GenAI semantic conventions'
attributes, sent over OTLP/HTTP when `[tracing] enabled` (the `otel` extra installs the SDK).

Off (the default), every function here is a cheap no-op and the SDK is never imported. The
node keeps a provider of its own (one a process, set when its runtime starts) rather than
OpenTelemetry's global one, which can be set only once. A run's span is opened on the
agent's worker thread when the run starts and made current there (a context variable), so
the host calls of the run nest under it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger(__name__)
_tracer: Any = None  # an opentelemetry Tracer, when tracing is on
_provider: Any = None


def enabled() -> bool:
    return _tracer is not None


def start(section: Any) -> None:
    """Set up the exporter from `[tracing]`; a missing SDK is said once in the log."""
    global _tracer, _provider
    if not section.enabled:
        return
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.error("[tracing] enabled, but no OpenTelemetry SDK: pip install 'agent-node[otel]'")
        return
    provider = TracerProvider(resource=Resource.create({"service.name": section.service_name}))
    exporter = OTLPSpanExporter(endpoint=section.endpoint, headers=dict(section.headers))
    provider.add_span_processor(
        BatchSpanProcessor(exporter, schedule_delay_millis=section.export_interval_ms)
    )
    _provider, _tracer = provider, provider.get_tracer("agent-node")


def stop() -> None:
    """Send what is left and stop (the node's shutdown)."""
    global _tracer, _provider
    if _provider is not None:
        try:
            _provider.shutdown()
        except Exception as e:  # an unreachable collector must not stop the shutdown
            log.warning("tracing: the last spans were not sent: %s", e)
    _tracer = _provider = None


def begin(name: str, attributes: Mapping[str, Any]) -> Any:
    """Open a span and make it current on this thread: (span, token) for `end`, or None."""
    if _tracer is None:
        return None
    from opentelemetry import context, trace

    span = _tracer.start_span(name, attributes=dict(attributes))
    token = context.attach(trace.set_span_in_context(span))
    return span, token


def end(opened: Any, error: str | None = None, attributes: Mapping[str, Any] | None = None) -> None:
    if opened is None:
        return
    from opentelemetry import context
    from opentelemetry.trace import Status, StatusCode

    span, token = opened
    if attributes:
        span.set_attributes(dict(attributes))
    if error:
        span.set_status(Status(StatusCode.ERROR, error[:500]))
    span.end()
    with contextlib.suppress(ValueError):  # detached in another context already
        context.detach(token)


@contextlib.contextmanager
def span(name: str, attributes: Mapping[str, Any]) -> Iterator[Any]:
    """A span around a block (current inside it); the span, or None when tracing is off. An
    exception leaving the block marks it as an error."""
    opened = begin(name, attributes)
    try:
        yield opened[0] if opened is not None else None
    except BaseException as e:
        end(opened, error=f"{type(e).__name__}: {e}")
        raise
    end(opened)


def annotate(attributes: Mapping[str, Any]) -> None:
    """Add attributes to the current span (nothing when tracing is off)."""
    if _tracer is None:
        return
    from opentelemetry import trace

    trace.get_current_span().set_attributes(dict(attributes))


def fetch_attributes(method: str, url: str) -> dict[str, Any]:
    """An http_fetch's span attributes, as OpenTelemetry's HTTP client conventions name them:
    the method and the server, never the URL's path or query (they may hold a secret)."""
    parts = urlsplit(url)
    found: dict[str, Any] = {"http.request.method": method[:20]}
    if parts.hostname:
        found["server.address"] = parts.hostname[:255]
    with contextlib.suppress(ValueError):
        if parts.port is not None:
            found["server.port"] = parts.port
    return found


def run_attributes(run: Any) -> dict[str, Any]:
    """A run's span attributes: the agent, the kind of run and what it is about."""
    return {
        "agent": run.agent,
        "agent.run_id": run.run_id,
        "agent.run_kind": run.kind,
        "agent.run_detail": run.detail[:200],
    }


def trace_id() -> str:
    """The current span's trace id (32 hex digits), or "" (off, or no span)."""
    if _tracer is None:
        return ""
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else ""


def event_trace_id() -> str | None:
    """The trace id as a journaled event's optional `trace_id`: None (absent) when off."""
    return trace_id() or None
