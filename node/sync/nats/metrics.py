"""Metrics of the NATS transport, registered in the node's registry only when it is used."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

PREFIX = "svc_nats_"


class NatsMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(PREFIX + name, doc, registry=registry)

        def counter(name: str, doc: str, *labels: str) -> Counter:
            return Counter(PREFIX + name, doc, labels, registry=registry)

        self.consumer_lag = gauge(
            "consumer_lag", "Messages on the mesh stream not yet fetched or acknowledged"
        )
        self.pending_publishes = gauge(
            "pending_publishes", "Own envelopes published, not yet acknowledged"
        )
        self.published = counter("published", "Own envelopes acknowledged by JetStream")
        self.published_messages = counter(
            "published_messages",
            "Stream messages of own envelopes acknowledged by JetStream (a run of one journal's"
            " envelopes each)",
        )
        self.redeliveries = counter("redeliveries", "Stream messages delivered more than once")
        self.repairs = counter(
            "repaired_envelopes", "Envelopes fetched over HTTP to fill a gap the stream could not"
        )
        self.heads_records = counter(
            "heads_records",
            "Peers' heads records delivered by the heads bucket's stream (one per change)",
        )
        self.heads_restarts = counter(
            "heads_restarts",
            "Times the follower of peers' heads started over (its consumer was lost, fell"
            " silent or skipped a record, or a call failed)",
        )
        self.stalls = counter(
            "stalls",
            "Connections to NATS restarted because one of its loops stopped turning (loop"
            " 'mesh': the transport itself failed and was started again)",
            "loop",
        )
        self.repair_jobs = gauge(
            "repair_jobs", "Journals waiting for a repair (over HTTP or the stream)"
        )
