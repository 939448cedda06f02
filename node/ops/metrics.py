"""The eight metric families of the spec, in a registry of the node's own."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from node.ops.version import __version__, build_commit

# what aiohttp's parser raises for the requests it refuses most (ops/logsetup.py ProtocolLogger)
MALFORMED_KINDS = ("BadHttpMessage", "BadHttpMethod", "LineTooLong", "InvalidHeader")
# why node/web/connections.py closed or refused a connection
CONNECTION_REASONS = (
    "refused",  # full, nothing to evict and no reserved slot left
    "evicted_silent",  # the oldest connection without a whole request made room
    "evicted_idle",  # the oldest idle keep-alive connection made room
    "header_timeout",  # no whole request within the header deadline
    "handshake_timeout",  # the TLS handshake took the whole header deadline
    "handshake_failed",  # not TLS, or a handshake the node refused
    "write_timeout",  # the client stopped reading a response
    "reserved_refused",  # on a reserved slot, a request neither for health nor by an admin
)
BODY_REASONS = ("timeout", "disconnect")
THROTTLE_LIMITS = ("requests_per_token", "uploads_per_token")

disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus-client has no hint


class NodeMetrics:
    def __init__(self, agents: Iterable[str] = ()) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.build_info = Gauge(
            "svc_build_info", "Build metadata", ["version", "commit"], registry=r
        )
        self.agents_total = Gauge("svc_agents_total", "Number of loaded agents", registry=r)
        self.agent_restarts = Counter(
            "svc_agent_restarts", "Restart count per agent", ["agent"], registry=r
        )
        self.inference_requests = Counter(
            "svc_inference_requests", "Inference requests by route", ["route"], registry=r
        )
        self.fuel_consumed = Counter(
            "svc_fuel_consumed", "WASM fuel consumed", ["agent"], registry=r
        )
        self.sync_envelopes = Counter(
            "svc_sync_envelopes", "Sync envelopes sent and received", registry=r
        )
        self.approvals_pending = Gauge(
            "svc_approvals_pending", "Pending approval requests", registry=r
        )
        self.request_duration = Histogram(
            "svc_http_request_duration_seconds", "API request latency", registry=r
        )
        # Beyond the spec's eight: what hostile input cost (docs/mesh.md, docs/operations.md).
        self.sync_rejected = Counter(
            "svc_sync_rejected", "Replicated envelopes rejected, by reason", ["reason"], registry=r
        )
        self.listener_faults = Counter(
            "svc_listener_faults",
            "Commit listeners (read models, streams) that raised on an envelope",
            ["listener"],
            registry=r,
        )
        self.malformed_requests = Counter(
            "svc_http_malformed_requests",
            "Requests the HTTP parser refused (400), by aiohttp's name for what was wrong",
            ["kind"],
            registry=r,
        )
        # policy (issue 47): what the approval policies ruled (docs/approvals.md)
        self.policy_rulings = Counter(
            "svc_policy_rulings",
            "Approval requests the policy set ruled on, by outcome (permit, forbid, ask)",
            ["outcome"],
            registry=r,
        )
        for outcome in ("permit", "forbid", "ask"):
            self.policy_rulings.labels(outcome=outcome)
        # edge (issue 45): what the node did to protect itself from clients (node/web/)
        self.connections_closed = Counter(
            "svc_http_connections_closed",
            "Connections the node closed or refused to protect itself, by reason",
            ["reason"],
            registry=r,
        )
        self.bodies_cut = Counter(
            "svc_http_bodies_cut",
            "Request bodies that did not arrive whole: too slow (timeout) or the client left",
            ["reason"],
            registry=r,
        )
        self.requests_throttled = Counter(
            "svc_http_requests_throttled",
            "Requests answered 429 because their token had too many in flight, by limit",
            ["limit"],
            registry=r,
        )
        self.build_info.labels(version=__version__, commit=build_commit()).set(1)
        for reason in CONNECTION_REASONS:
            self.connections_closed.labels(reason=reason)
        for reason in BODY_REASONS:
            self.bodies_cut.labels(reason=reason)
        for limit in THROTTLE_LIMITS:
            self.requests_throttled.labels(limit=limit)
        for route in ("local", "cloud"):
            self.inference_requests.labels(route=route)
        for kind in MALFORMED_KINDS:  # a 0 sample from the start, so that alerts see the first
            self.malformed_requests.labels(kind=kind)
        for agent in agents:
            self.add_agent(agent)

    def add_agent(self, agent: str) -> None:
        """Per-agent families show a 0 sample for every configured agent from the start."""
        self.agent_restarts.labels(agent=agent)
        self.fuel_consumed.labels(agent=agent)

    def count_malformed(self, kind: str) -> None:
        self.malformed_requests.labels(kind=kind).inc()

    def count_connection(self, reason: str) -> None:
        self.connections_closed.labels(reason=reason).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
