"""The placement manager's parts on one NATS connection: leases, adverts, components."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nats.js import JetStreamContext

if TYPE_CHECKING:
    from node.placement.manager import Link, PlacementManager


async def open_link(manager: PlacementManager, js: JetStreamContext, publisher: Any) -> Link:
    """Open the buckets (parts of node/placement/) for this connection; their loops (lease
    renewals, this node's advert) run as the link's tasks."""
    from node.placement.adverts import NodeAdverts
    from node.placement.components import ComponentStore
    from node.placement.leases import LeaseBook

    from node.placement.manager import Link

    ctx = manager.ctx
    leases = await LeaseBook.open(ctx, js, on_lost=manager.lease_lost)
    adverts = await NodeAdverts.open(ctx, js)
    components = await ComponentStore.open(ctx, js)
    return Link(js=js, leases=leases, adverts=adverts, components=components, publisher=publisher)
