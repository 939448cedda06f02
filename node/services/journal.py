"""The single-writer rule: only an agent's home node appends to its journal."""

from __future__ import annotations

from node.context import NodeContext
from node.web.http import Problem
from projections.journals import Journals


def ensure_local(ctx: NodeContext, stream: str) -> None:
    """409 naming the home node when `stream` is a replica of a journal written elsewhere."""
    home = ctx.projections.get(Journals).home_of(stream)
    if home is not None and home != ctx.name:
        raise Problem(
            409,
            f"{stream!r} is hosted on node {home!r}; send this command there",
            home_node=home,
        )
