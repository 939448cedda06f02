"""Peers' heads records are claims to check, not facts: which ones may trigger a repair.

A peer's heads record (nats/heads.py) may name any journal at any seq. Taken as is, a lying
member makes every node repair journals that do not exist, asking the liar first, while real
repairs wait. So a claim is taken for repair only when the peer could hold what it claims:

- a journal homed at the claiming peer (its own journal): any seq;
- a journal homed at another node: at most what the home itself reports (or this node holds),
  so a relay's claim never goes past what its writer wrote;
- a journal this node does not hold yet (home unknown) that the peer may own by the journal-home
  rule (sync/rules/ownership.py: not this node's, not another peer's node or key journal): at most
  MAX_UNHELD_CLAIMS such journals per peer;
- never a `$` journal, nor one homed here.

A peer whose claims do not pan out (a repair from it ends short of what it claimed, or it does
not answer) CLAIM_FAILURES_TO_DEMOTE times in a row is demoted: its claims are ignored and it
is asked last, for DEMOTE_SECS (doubling on each demotion, up to MAX_DEMOTE_SECS), and this
node reports it once as a `high` finding (incidents.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from node.context import NodeContext
from node.sync.incidents import Incidents
from node.sync.rules.ownership import Ownership
from projections.journals import Journals
from projections.keys import is_key_journal, key_journal

log = logging.getLogger("agent-node.sync")
MAX_UNHELD_CLAIMS = 1000
CLAIM_FAILURES_TO_DEMOTE = 3
DEMOTE_SECS = 300.0
MAX_DEMOTE_SECS = 3600.0


class _Standing:
    """How one peer's claims have panned out."""

    __slots__ = ("demoted_until", "demotions", "failures")

    def __init__(self) -> None:
        self.failures = 0  # claims in a row that did not pan out
        self.demotions = 0
        self.demoted_until = 0.0


class ClaimBook:
    def __init__(self, ctx: NodeContext, incidents: Incidents) -> None:
        self._ctx = ctx
        self._incidents = incidents
        self._ownership = Ownership(ctx)
        self._peers = {p.name for p in ctx.config.peers}
        self._standing = {name: _Standing() for name in self._peers}
        self.raw: dict[str, dict[str, int]] = {}  # configured peer → its record, as read
        self._admitted: dict[str, dict[str, int]] = {}

    def take(self, peer: str, heads: Mapping[str, int]) -> None:
        """A configured peer's heads record: what of it may trigger a repair is admitted."""
        self.raw[peer] = dict(heads)
        self._admitted[peer] = self._admit(peer, heads)

    def admitted(self) -> dict[str, dict[str, int]]:
        """The claims of every peer that is not demoted, each capped as above (recomputed
        at each read of the bucket, so a home's newer record lifts its relays' caps)."""
        now = time.monotonic()
        return {p: c for p, c in self._admitted.items() if self._standing[p].demoted_until <= now}

    def claim(self, peer: str, journal: str) -> int:
        if self.demoted(peer):
            return 0
        return self._admitted.get(peer, {}).get(journal, 0)

    def demoted(self, peer: str) -> bool:
        standing = self._standing.get(peer)
        return standing is not None and standing.demoted_until > time.monotonic()

    def _admit(self, peer: str, heads: Mapping[str, int]) -> dict[str, int]:
        journals = self._ctx.projections.get(Journals)
        held, home = journals.head, journals.home
        out: dict[str, int] = {}
        unheld = 0
        for journal, seq in heads.items():
            if seq <= 0 or journal.startswith("$"):
                continue
            writer = home.get(journal)
            if writer == self._ctx.name:
                continue  # ours: no peer holds more of it than we wrote
            if writer == peer:
                out[journal] = seq
            elif writer is not None:
                home_claim = self.raw.get(writer, {}).get(journal, 0)
                capped = min(seq, max(held.get(journal, 0), home_claim))
                if capped > 0:
                    out[journal] = capped
            elif unheld < MAX_UNHELD_CLAIMS and self._may_own(peer, journal):
                unheld += 1
                out[journal] = seq
        return out

    def _may_own(self, peer: str, journal: str) -> bool:
        """Whether `peer` could be the home of `journal`, which this node does not hold."""
        if self._ownership.refuse(journal) is not None:
            return False
        if is_key_journal(journal) and journal != key_journal(peer):
            return False
        return self._ownership.refuse_home(journal, peer) is None

    async def panned_out(self, peer: str) -> None:
        standing = self._standing.get(peer)
        if standing is not None:
            standing.failures = 0

    async def fell_short(
        self, peer: str, journal: str, claimed: int, reached: int, why: str
    ) -> None:
        """A repair from `peer` of `journal`, which it claimed to `claimed`, ended at
        `reached`: after CLAIM_FAILURES_TO_DEMOTE such in a row the peer is demoted."""
        standing = self._standing.get(peer)
        if standing is None or standing.demoted_until > time.monotonic():
            return
        standing.failures += 1
        if standing.failures < CLAIM_FAILURES_TO_DEMOTE:
            return
        standing.failures = 0
        secs = min(MAX_DEMOTE_SECS, DEMOTE_SECS * 2**standing.demotions)
        standing.demotions += 1
        standing.demoted_until = time.monotonic() + secs
        log.warning(
            "peer %s demoted for %.0f s: its heads claims do not pan out (%s#%d claimed, "
            "%d had: %s)",
            peer,
            secs,
            journal,
            claimed,
            reached,
            why,
        )
        await self._incidents.report(
            f"nats-unfounded-heads/{peer}",
            "high",
            f"peer {peer} reports heads it does not serve",
            f"{CLAIM_FAILURES_TO_DEMOTE} repairs in a row from {peer} ended short of the heads "
            f"it claims; last: {journal}#{claimed} claimed, {reached} had ({why}). Its claims "
            f"are ignored and it is asked last for {secs:.0f} s."[:1000],
        )
