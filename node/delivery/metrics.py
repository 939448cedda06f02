"""The outbox's metric families, in the node's registry (GET /api/v1/metrics)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

KINDS = ("push", "webhook", "apprise")
ENDINGS = ("delivered", "expired", "dropped", "gone", "resolved")
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600)


class DeliveryMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.enqueued = Counter(
            "svc_delivery_enqueued",
            "Notifications queued in the outbox, by kind",
            ["kind"],
            registry=registry,
        )
        self.attempts = Counter(
            "svc_delivery_attempts",
            "Delivery attempts, by kind and outcome (ok, failed, refused)",
            ["kind", "outcome"],
            registry=registry,
        )
        self.ended = Counter(
            "svc_delivery_ended",
            "Notifications that left the outbox, by kind and how",
            ["kind", "how"],
            registry=registry,
        )
        self.pending = Gauge(
            "svc_delivery_pending",
            "Notifications waiting in the outbox, by what they are about (push, approval)",
            ["about"],
            registry=registry,
        )
        self.latency = Histogram(
            "svc_delivery_latency_seconds",
            "From the journaled event to the receiver's 2xx, by kind",
            ["kind"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.lag = Gauge(
            "svc_delivery_ingest_lag",
            "Journal envelopes not yet folded into the outbox",
            registry=registry,
        )
        for kind in KINDS:  # a 0 sample from the start, so that alerts see the first
            self.enqueued.labels(kind=kind)
            for outcome in ("ok", "failed", "refused"):
                self.attempts.labels(kind=kind, outcome=outcome)
            for how in ENDINGS:
                self.ended.labels(kind=kind, how=how)
        for about in ("push", "approval"):
            self.pending.labels(about=about)
