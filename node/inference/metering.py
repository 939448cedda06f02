"""Metrics of inference by agent and model (docs/inference.md, "Metering"), in the node's
registry beside the spec's `svc_inference_requests_total{route}`, which keeps its meaning:
one sample per call, labelled by the route of the model it used."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from node.inference.models import NANOS
from node.ops.metrics import NodeMetrics

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class InferenceMetrics:
    def __init__(self, node: NodeMetrics) -> None:
        r = node.registry
        self.requests = node.inference_requests
        labels = ["agent", "model"]
        self.calls = Counter(
            "svc_inference_calls",
            "Inference calls by agent, model and outcome (ok, error, refused)",
            [*labels, "outcome"],
            registry=r,
        )
        self.tokens = Counter(
            "svc_inference_tokens",
            "Tokens the providers counted, by agent, model and kind (input, output)",
            [*labels, "kind"],
            registry=r,
        )
        self.cost = Counter(
            "svc_inference_cost", "Cost of inference by agent and model", labels, registry=r
        )
        self.latency = Histogram(
            "svc_inference_duration_seconds",
            "Time of an inference call, from asking to the last token, by agent and model",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )

    def answered(
        self,
        agent: str,
        model: str,
        input_tokens: int,
        output_tokens: int,
        cost_nanos: int,
        seconds: float,
    ) -> None:
        self.calls.labels(agent=agent, model=model, outcome="ok").inc()
        self.tokens.labels(agent=agent, model=model, kind="input").inc(input_tokens)
        self.tokens.labels(agent=agent, model=model, kind="output").inc(output_tokens)
        self.cost.labels(agent=agent, model=model).inc(cost_nanos / NANOS)
        self.latency.labels(agent=agent, model=model).observe(seconds)

    def failed(self, agent: str, model: str, refused: bool) -> None:
        outcome = "refused" if refused else "error"
        self.calls.labels(agent=agent, model=model, outcome=outcome).inc()
