"""The convergence report: how far each configured peer has acknowledged one journal."""

from __future__ import annotations

import msgspec

from node.context import NodeContext
from projections.journals import Journals
from projections.peers import PeerBook


class PeerLag(msgspec.Struct):
    peer_id: str
    acked_seq: int
    lag: int


class Convergence(msgspec.Struct):
    agent: str
    local_seq: int
    peers: list[PeerLag]
    converged: bool
    home: str | None  # the node that writes this journal


def convergence_report(ctx: NodeContext, agent: str) -> Convergence:
    """`lag` = local_seq - acked_seq, never below 0 (a peer ahead of us has acked all we have)."""
    journals = ctx.projections.get(Journals)
    book = ctx.projections.get(PeerBook)
    local_seq = journals.head.get(agent, 0)
    peers = []
    for peer in ctx.config.peers:
        acked = book.acked(peer.name, agent)
        peers.append(PeerLag(peer.name, acked, max(0, local_seq - acked)))
    return Convergence(
        agent, local_seq, peers, all(p.lag == 0 for p in peers), journals.home_of(agent)
    )
