"""The placement manager's key on the app, and the wait for a placed agent's write to be
acknowledged: importable without nats-py (an optional extra)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from node.placement.manager import PlacementManager

PLACEMENT: web.AppKey[PlacementManager] = web.AppKey("placement")


async def confirmed(app: web.Application, agents: Iterable[str]) -> None:
    """A write an API answer acknowledges, to a placed agent's journal, counts once the mesh's
    stream holds it within the lease (PlacementManager.confirm: else 503, docs/mesh.md "What is
    acknowledged"); nothing to wait for without placement or for an agent not placed here."""
    placement = app.get(PLACEMENT)
    if placement is not None:
        for agent in dict.fromkeys(agents):
            await placement.confirm(agent)
