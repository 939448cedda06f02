"""What every part of the node shares: config, identity, journal, read models, metrics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from nacl.signing import SigningKey

from eventstore.store import EventStore
from node.config import Config
from node.metrics import NodeMetrics
from projections.base import Projections


@dataclass
class NodeContext:
    config: Config
    key: SigningKey
    store: EventStore
    projections: Projections
    metrics: NodeMetrics
    shutting_down: bool = False
    # Services of later areas (approval gate, tasks, grants, registry, runtime, bus, sync)
    # attach themselves here by name so handlers can find them.
    services: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.config.node.name


CONTEXT: web.AppKey[NodeContext] = web.AppKey("context", NodeContext)


def context_of(request: web.Request) -> NodeContext:
    return request.app[CONTEXT]
