"""What every part of the node shares: config, identity, journal, read models, metrics.

Services are not here: each is an `web.AppKey` declared next to its class (docs/design.md)."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web
from nacl.signing import SigningKey

from eventstore.store import EventStore
from node.config.model import Config
from node.ops.metrics import NodeMetrics
from projections.base import Projections


@dataclass
class NodeContext:
    config: Config
    key: SigningKey
    store: EventStore
    projections: Projections
    metrics: NodeMetrics
    shutting_down: bool = False

    @property
    def name(self) -> str:
        return self.config.node.name


CONTEXT: web.AppKey[NodeContext] = web.AppKey("context", NodeContext)


def context_of(request: web.Request) -> NodeContext:
    return request.app[CONTEXT]
