"""The convergence report: how far each configured peer has acknowledged one journal."""

from __future__ import annotations

from typing import Any

from node.context import NodeContext
from projections.journals import Journals
from projections.peers import PeerBook


def convergence_report(ctx: NodeContext, agent: str) -> dict[str, Any]:
    """`lag` = local_seq - acked_seq, never below 0 (a peer ahead of us has acked all we have)."""
    journals = ctx.projections.get(Journals)
    book = ctx.projections.get(PeerBook)
    local_seq = journals.head.get(agent, 0)
    peers = []
    for peer in ctx.config.peers:
        acked = book.acked(peer.name, agent)
        peers.append({"peer_id": peer.name, "acked_seq": acked, "lag": max(0, local_seq - acked)})
    return {
        "agent": agent,
        "local_seq": local_seq,
        "peers": peers,
        "converged": all(p["lag"] == 0 for p in peers),
        "home": journals.home_of(agent),
    }
