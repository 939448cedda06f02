"""`[tracing]`: OpenTelemetry spans over OTLP/HTTP (node/ops/tracing.py), off by default."""

from __future__ import annotations

from typing import Annotated

import msgspec


class TracingSection(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    enabled: bool = False
    # the collector's OTLP/HTTP traces endpoint (protobuf)
    endpoint: str = "http://127.0.0.1:4318/v1/traces"
    service_name: str = "agent-node"
    # how long finished spans wait to be sent together (the batch processor's delay)
    export_interval_ms: Annotated[int, msgspec.Meta(ge=10, le=60_000)] = 2000
    # headers sent with each export (an API key of a hosted collector: they are never logged)
    headers: dict[str, str] = {}
