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
        self.build_info.labels(version=__version__, commit=build_commit()).set(1)
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

    def render(self) -> bytes:
        return generate_latest(self.registry)
