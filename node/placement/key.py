"""The placement manager's key on the app, importable without nats-py (an optional extra)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from node.placement.manager import PlacementManager

PLACEMENT: web.AppKey[PlacementManager] = web.AppKey("placement")
