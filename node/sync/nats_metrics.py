"""Metrics of the NATS transport, registered in the node's registry only when it is used."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class NatsMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.consumer_lag = Gauge(
            "svc_nats_consumer_lag",
            "Messages on the mesh stream not yet fetched or acknowledged",
            registry=r,
        )
        self.pending_publishes = Gauge(
            "svc_nats_pending_publishes",
            "Own envelopes published, not yet acknowledged",
            registry=r,
        )
        self.published = Counter(
            "svc_nats_published", "Own envelopes acknowledged by JetStream", registry=r
        )
        self.published_messages = Counter(
            "svc_nats_published_messages",
            "Stream messages of own envelopes acknowledged by JetStream (a run of one journal's"
            " envelopes each)",
            registry=r,
        )
        self.redeliveries = Counter(
            "svc_nats_redeliveries", "Stream messages delivered more than once", registry=r
        )
        self.repairs = Counter(
            "svc_nats_repaired_envelopes",
            "Envelopes fetched over HTTP to fill a gap the stream could not",
            registry=r,
        )
        self.heads_records = Counter(
            "svc_nats_heads_records",
            "Peers' heads records delivered by the heads bucket's stream (one per change)",
            registry=r,
        )
        self.heads_restarts = Counter(
            "svc_nats_heads_restarts",
            "Times the follower of peers' heads started over (its consumer was lost, fell"
            " silent or skipped a record, or a call failed)",
            registry=r,
        )
        self.stalls = Counter(
            "svc_nats_stalls",
            "Connections to NATS restarted because one of its loops stopped turning (loop"
            " 'mesh': the transport itself failed and was started again)",
            ["loop"],
            registry=r,
        )
        self.repair_jobs = Gauge(
            "svc_nats_repair_jobs",
            "Journals waiting for a repair (over HTTP or the stream)",
            registry=r,
        )
