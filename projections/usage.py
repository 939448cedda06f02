"""Inference usage: per agent, model and hour (UTC), what the calls of `inference.completed`
and `inference.failed` counted (docs/inference.md, "Metering").

A pure fold of the journal; its size grows with the hours an agent used a model (one bucket of
seven integers each), not with the calls. `agent.retired` keeps the buckets: what a removed
deployment spent was spent. A payload that is not the catalogue's shape is skipped.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec

from eventstore.envelope import Envelope
from projections import catalogue as c

FIELDS = ("calls", "errors", "refused", "input_tokens", "output_tokens", "cost_nanos", "ms")


class Bucket(msgspec.Struct, kw_only=True):
    calls: int = 0
    errors: int = 0
    refused: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_nanos: int = 0
    ms: int = 0  # the calls' durations, summed

    def add(self, other: Bucket) -> None:
        for name in FIELDS:
            setattr(self, name, getattr(self, name) + getattr(other, name))


def hour_of(ts: str) -> str | None:
    when = c.parse_ts(ts)
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H") if when is not None else None


class Usage:
    name = "usage"
    handles = frozenset({c.INFERENCE_COMPLETED, c.INFERENCE_FAILED})

    def __init__(self) -> None:
        # (agent, model alias, hour "YYYY-MM-DDTHH") -> bucket
        self.buckets: dict[tuple[str, str, str], Bucket] = {}

    def apply(self, envelope: Envelope) -> None:
        event = envelope.event
        hour = hour_of(event.ts)
        payload = c.payload_of(envelope)
        if hour is None:
            return
        if isinstance(payload, c.InferenceCompleted):
            model = payload.model or payload.route
            bucket = self._bucket(envelope.stream, model, hour)
            bucket.calls += 1
            bucket.input_tokens += payload.input_tokens
            bucket.output_tokens += payload.output_tokens
            bucket.cost_nanos += payload.cost_nanos
            bucket.ms += payload.duration_ms
        elif isinstance(payload, c.InferenceFailed):
            bucket = self._bucket(envelope.stream, payload.model or payload.route, hour)
            bucket.calls += 1
            bucket.ms += payload.duration_ms
            if payload.refused:
                bucket.refused += 1
            else:
                bucket.errors += 1

    def _bucket(self, agent: str, model: str, hour: str) -> Bucket:
        key = (agent, model, hour)
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = Bucket()
        return bucket

    def totals(self, since: datetime, agent: str | None = None) -> dict[str, dict[str, Bucket]]:
        """agent -> model -> the sum of its buckets from the hour of `since` on."""
        first = since.astimezone(UTC).strftime("%Y-%m-%dT%H")
        out: dict[str, dict[str, Bucket]] = {}
        for (name, model, hour), bucket in self.buckets.items():
            if hour < first or (agent is not None and name != agent):
                continue
            out.setdefault(name, {}).setdefault(model, Bucket()).add(bucket)
        return out

    def snapshot(self) -> Any:
        return {"|".join(k): msgspec.to_builtins(v) for k, v in sorted(self.buckets.items())}
