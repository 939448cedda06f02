"""Metrics of placement, registered in the node's registry only where placement runs: what a
monitoring system needs to see failovers happen (docs/operations.md, "Metrics")."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

PREFIX = "svc_placement_"
# a failover takes about a lease TTL (10 s by default) plus seconds; a slow one, minutes
FAILOVER_BUCKETS = (1, 2, 3, 5, 8, 10, 15, 20, 30, 45, 60, 120, 300, float("inf"))


class PlacementMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.leases_held = Gauge(
            PREFIX + "leases_held", "Leases of placed agents this node holds now", registry=registry
        )
        self.takeovers = Counter(
            PREFIX + "takeovers", "Placed agents this node took over (failovers)", registry=registry
        )
        self.moves = Counter(
            PREFIX + "moves", "Planned moves this node handed over (handoffs)", registry=registry
        )
        self.move_refusals = Counter(
            PREFIX + "move_refusals",
            "Planned moves refused or not acknowledged, by why",
            ["reason"],
            registry=registry,
        )
        self.failover_seconds = Histogram(
            PREFIX + "failover_seconds",
            "From the previous home's last envelope to this node's takeover",
            buckets=FAILOVER_BUCKETS,
            registry=registry,
        )
        self.refused_takeovers = Counter(
            PREFIX + "refused_takeovers",
            "Takeovers a member signed that this node refused (the home alive, history erased)",
            registry=registry,
        )
