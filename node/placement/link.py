"""The placement manager's parts on one NATS connection: adverts and components (the leases
are the manager's own, attached by it), with this node's advert put while connected."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from nats.js import JetStreamContext

from node.placement.adverts import NodeAdverts
from node.placement.components import ComponentStore

if TYPE_CHECKING:
    from node.placement.hosting import Link
    from node.placement.manager import PlacementManager


async def open_link(manager: PlacementManager, js: JetStreamContext, publisher: Any) -> Link:
    from node.placement.hosting import Link

    ctx = manager.ctx
    mesh = ctx.config.mesh
    adverts = NodeAdverts(ctx.name, mesh, manager.ready_to_host, lambda: len(manager.running))
    components = ComponentStore(mesh, ctx.config.node.max_upload_mb << 20)
    await adverts.attach(js)
    await components.attach(js)
    link = Link(js=js, adverts=adverts, components=components, publisher=publisher)
    link.tasks.append(asyncio.create_task(adverts.run(), name="placement-advert"))
    return link
