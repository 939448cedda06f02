"""Becoming an agent's home: the journal names this node (a new agent, a restart, a handoff
naming it), or another node is home and its lease is gone.

Named home: once its copy holds what the stream holds and no other node wrote after this
node's tenure began, it owns the journal again, takes its lease and starts the agent (after a
move, `agent.moved_in`). Home elsewhere with its lease gone (no live record at the journal's
epoch: it died, froze or lost NATS): a node that may host the agent claims the next epoch (its
own lease record at epoch + 1) and, when its claim is the first one written (the lowest
revision among the set's records at that epoch), catches up with the stream, appends
`journal.takeover`, closes the lost home's pending approvals ("node lost"), starts the agent
with its open tasks and appends `agent.moved_in`. A claim that came first but led to no
takeover within a TTL is ignored from then on (and reported), so a member cannot hold an agent
down by claiming.

Both go by the stream's lease log (node/placement/leaselog.py), as every node will judge: a
taker writes its takeover only when, read after its own record is in the stream, the home's
lease was lapsed at that record, and it names the record's position in the takeover; a named
home that (re)takes its lease waits while another node of the set holds a record of the next
epoch live at its own record, holding its lease, until no takeover naming that record can
still come (a TTL past it, everything before then judged: `_contended_at`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import datetime
from typing import Any

from nats.errors import Error as NatsError

from node.placement import leaselog
from node.placement.catchup import read_through
from node.placement.hosting import NODE_LOST, Claims, Hosting, Link
from node.placement.leaselog import Logged
from node.placement.leases import LeaseError
from node.placement.standby import prepared_key
from node.services.findings import NewFinding, report_finding
from projections import catalogue as c
from projections.placements import Placed

log = logging.getLogger("agent-node.placement")
HANDOFF_RETURN_TTLS = 3  # the old home waits this many TTLs for a target that never took it


class Takeovers(Hosting):
    # ------------------------------------------------------------------ home
    def _tenure_start(self, agent: str) -> int:
        """The first seq this node writes as the journal's home in its current epoch."""
        moves = self.journals.moves_of(agent)
        if not moves or moves[-1]["to"] != self.ctx.name:
            return 1
        move = moves[-1]
        return int(move["seq"]) + (1 if move["reason"] == "handoff" else 0)

    async def _become_home(self, link: Link, placed: Placed) -> None:
        """The journal names this node: run the agent once its copy is the journal's and the
        lease is held."""
        agent, epoch = placed.agent, self.journals.epoch_of(placed.agent)
        if not await self._caught_up(link, placed):
            log.info("agent %s: this node's copy is behind the stream; not starting yet", agent)
            return
        if self.journals.home_of(agent) not in (None, self.ctx.name):
            return  # a takeover arrived while catching up
        newer = await self._others_wrote_since(link, placed, self._tenure_start(agent))
        if newer:
            log.warning(
                "agent %s: another node wrote its seq %d after this node's tenure began: this "
                "copy is not the journal; staying a replica until the takeover reaches it",
                agent,
                newer,
            )
            return
        # nothing lands (an operator's write, say) while it may still wait: the lease's
        # renewals lift a fence, not a disown
        self.ctx.store.disown(agent)
        lease = await self.leases.acquire(agent, epoch)  # the one held, when it waited
        if await self._contended_at(link, placed, epoch, lease.position):
            return
        self.ctx.store.own(agent)
        self.ctx.store.fence(agent, lease.valid_until)
        await self._start(link, placed)
        if epoch > 0 and placed.moved_in_epoch < epoch:
            await self._moved_in(agent, epoch, "handoff")

    async def _contended_at(self, link: Link, placed: Placed, epoch: int, position: int) -> bool:
        """Whether another node of the set has a lease record of the next epoch live at this
        node's acquire record (`position`), and a takeover naming it may still come: it would
        remove what this node writes after its own record (docs/mesh.md, "Leases"). None can
        once the stream holds a renewal of this node's stamped over a TTL after its acquire
        record (a takeover must enter within a TTL of the record it names, else every judge
        refuses it) and this node, still home, has judged every message before that renewal.
        The first such renewal it sees is kept: the newest is always just written, and its
        consumer has rarely read that far yet (waiting for the newest took 1-4 TTLs in
        bench/failover.py's soak). This node waits holding its lease (the log shows it live,
        so no later record of another node can be named), and the next supervision pass looks
        again: a member that claims without end only delays the start by about a TTL. Unknown
        counts as contended."""
        mesh, agent = self.ctx.config.mesh.name, placed.agent
        try:
            mine = await leaselog.record_at(link.js, mesh, position)
            if mine is None:
                return True
            claimant = await self._next_epoch_claimant(link, placed, epoch, mine)
            if claimant is None:
                return False
            renewed = await self._renewal_past_ttl(link, agent, mine)
            if (
                renewed is not None
                and await read_through(link.js, mesh, self.ctx.name, renewed.position)
                and self.journals.home_of(agent) in (None, self.ctx.name)
            ):
                self._late_renewal.pop(agent, None)
                self._wait_logged.pop(agent, None)
                return False
        except (TimeoutError, NatsError):
            return True
        if self._wait_logged.get(agent) != (position, claimant):
            self._wait_logged[agent] = (position, claimant)
            log.info("agent %s: %s claims epoch %d; waiting", agent, claimant, epoch + 1)
        return True

    async def _renewal_past_ttl(self, link: Link, agent: str, mine: Logged) -> Logged | None:
        """This node's first renewal seen stamped over a TTL after its acquire record `mine`."""
        kept = self._late_renewal.get(agent)
        if kept is not None and kept[0] == mine.position:
            return kept[1]
        mesh = self.ctx.config.mesh.name
        renewed = await leaselog.last_record(link.js, mesh, agent, self.ctx.name)
        if renewed is None or renewed.stamp <= mine.stamp + self.leases.ttl:
            return None
        self._late_renewal[agent] = (mine.position, renewed)
        return renewed

    async def _next_epoch_claimant(
        self, link: Link, placed: Placed, epoch: int, mine: Logged
    ) -> str | None:
        """A node of the set whose lease record of a later epoch is live at `mine`."""
        mesh, agent = self.ctx.config.mesh.name, placed.agent
        for other in placed.placement:
            if other == self.ctx.name:
                continue
            live = await leaselog.live_at(
                link.js, mesh, agent, other, mine, self.leases.ttl, self.leases.lookup
            )
            record = (
                leaselog.record_of(live, mesh, agent, other, self.leases.lookup)
                if live is not None
                else None
            )
            if record is not None and not isinstance(record, str) and record.epoch > epoch:
                return other
        return None

    # ------------------------------------------------------------------ takeover
    async def _home_live(self, agent: str, home: str, epoch: int) -> bool:
        view = await self.leases.peek(agent, home)
        if view is not None and view.epoch == epoch:
            self._seen_live[agent] = epoch
            self._gone_since.pop(agent, None)
            return True
        return False

    def _grace_over(self, agent: str, home: str, epoch: int) -> bool:
        """Whether the home's lease has been gone long enough: at once when it was seen live
        at this epoch (it lapsed) or the last move was a takeover; a TTL after a handoff (its
        target takes the lease right after it), HANDOFF_RETURN_TTLS for the node that
        handed it over."""
        since = self._gone_since.setdefault(agent, time.monotonic())
        if self._seen_live.get(agent) == epoch:
            return True
        moves = self.journals.moves_of(agent)
        if not moves or moves[-1]["reason"] != "handoff":
            return True
        ttls = HANDOFF_RETURN_TTLS if self._handed.get(agent, (-1,))[0] == epoch else 1
        return time.monotonic() - since >= ttls * self.leases.ttl

    async def _maybe_take_over(self, link: Link, placed: Placed, home: str) -> None:
        agent, epoch = placed.agent, self.journals.epoch_of(placed.agent)
        stale = self.leases.held().get(agent)
        if stale is not None and stale.epoch <= epoch:
            await self.leases.release(agent)  # kept while a claim held it back: moved since
        if await self._home_live(agent, home, epoch) or not self._grace_over(agent, home, epoch):
            return
        others = [n for n in placed.placement if n not in (home, self.ctx.name)]
        if await self._ready_on_newer(link, placed, others):
            return  # a node ready on the current version takes it over, not this stand-in
        leader = await self._claim_leader(agent, others, epoch + 1)
        if leader is not None:
            return  # another node claimed it first: its takeover is on its way
        if not await self._caught_up(link, placed):
            return
        fresh = self.placements.get(agent)
        if (
            fresh is None
            or self.journals.home_of(agent) != home
            or self.journals.epoch_of(agent) != epoch
        ):
            return  # the stream held a move: look again next time
        runnable = self.runnable(fresh)
        if runnable is None:
            return  # its definition changed meanwhile to one not ready here
        placed = runnable
        held = self.ctx.store.head(agent)
        if await self._others_wrote_since(link, placed, (held.seq if held else 0) + 1):
            return  # something newer is in the stream: catch up first
        lease = await self.leases.acquire(agent, epoch + 1)
        leader = await self._claim_leader(agent, others, epoch + 1)
        mine = await self.leases.peek(agent, self.ctx.name)
        if leader is not None and (mine is None or leader.revision < mine.revision):
            await self.leases.release(agent)
            return
        if not await self._lapsed_at(link, placed, home, epoch, lease.position):
            await self.leases.release(agent)
            return
        if time.monotonic() - lease.acquired_at > self.leases.ttl - self.leases.margin:
            # every judge refuses a takeover that enters over a TTL after the record it names:
            # written now, it might reach the stream too late, and this copy alone would hold it
            log.info("agent %s: this node's lease record is too old to name; again", agent)
            await self.leases.release(agent)
            return
        await self._take_over(link, placed, home, epoch + 1, lease.revision, lease.position)

    async def _lapsed_at(
        self, link: Link, placed: Placed, home: str, epoch: int, position: int
    ) -> bool:
        """Whether the takeover may be written, as every node will judge it: the home's lease
        lapsed at this node's acquire record (`position` in the stream's lease log), and this
        node's copy holds what the stream held before it (read again now: it was read before
        the record was written)."""
        mesh = self.ctx.config.mesh.name
        try:
            acquired = await leaselog.record_at(link.js, mesh, position)
            if acquired is None:
                return False
            live = await leaselog.live_at(
                link.js, mesh, placed.agent, home, acquired, self.leases.ttl, self.leases.lookup
            )
        except (TimeoutError, NatsError):
            return False
        if live is not None:
            log.info(
                "agent %s: %s's lease was live at this node's lease record %d; not taking over",
                placed.agent,
                home,
                position,
            )
            return False
        if not await self._caught_up(link, placed):
            return False
        return self.journals.home_of(placed.agent) == home and (
            self.journals.epoch_of(placed.agent) == epoch
        )

    async def _ready_on_newer(self, link: Link, placed: Placed, others: list[str]) -> bool:
        """This node would run the version before the journal's (not compiled here yet) and a
        live member of the set advertises the agent ready on the journal's: that one comes
        first. Adverts that cannot be read count as none (this node stands in)."""
        latest = self.placements.get(placed.agent)
        if latest is None or latest.definition == placed.definition or not others:
            return False
        newer = prepared_key(placed.agent, latest.definition)  # `hosts` names no version
        with contextlib.suppress(Exception):
            async with asyncio.timeout(1.0):
                live = await link.adverts.live(others)
                return any(newer in advert.prepared for advert in live.values())
        return False

    async def _claim_leader(self, agent: str, others: list[str], epoch: int) -> Any:
        """The first live claim of `agent`'s epoch by another node of the set, unless that
        node led for a whole TTL without taking over (then it is ignored, and reported)."""
        claims = self._claims.get(agent)
        if claims is None or claims.epoch != epoch:
            claims = self._claims[agent] = Claims(epoch)
        contenders = await self.leases.contenders(agent, others, epoch)
        now = time.monotonic()
        for view in contenders:
            if view.holder in claims.ignored:
                continue
            led = claims.first_seen.setdefault(view.holder, now)
            if now - led < self.leases.ttl:
                return view
            claims.ignored.add(view.holder)
            await self.sync.incidents.report(
                f"stalled-claim/{agent}/{epoch}/{view.holder}",
                "high",
                f"node {view.holder} claimed agent {agent} and did not take it over",
                f"{view.holder}'s lease record of {agent} at epoch {epoch} came first, yet no "
                f"takeover followed within {self.leases.ttl:g} s; it is ignored from now on",
            )
        return None

    async def _take_over(
        self, link: Link, placed: Placed, previous: str, epoch: int, revision: int, position: int
    ) -> None:
        agent = placed.agent
        log.warning("agent %s: lease of %s gone; taking over (epoch %d)", agent, previous, epoch)
        self.ctx.store.own(agent)
        self.ctx.store.fence(agent, self.leases.valid_until(agent) or 0.0)
        takeover = c.JournalTakeover(
            epoch=epoch, lease_revision=revision, previous_home=previous, lease_position=position
        )
        head = self.ctx.store.head(agent)
        last = self.ctx.store.get(agent, head.seq) if head is not None else None
        last_ts = last.event.ts if last is not None else None
        try:
            envelope = await self.ctx.store.append(agent, *c.event_of(takeover))
        except BaseException:
            self.ctx.store.disown(agent)
            with contextlib.suppress(LeaseError, TimeoutError):
                await self.leases.release(agent)
            raise
        abandoned = await self.approvals.abandon_agent(agent, NODE_LOST)
        await self._start(link, placed)
        await self._moved_in(agent, epoch, "takeover", previous, len(abandoned))
        self.metrics.takeovers.inc()
        gap = _seconds_between(last_ts, envelope.event.ts)
        if gap is not None:
            self.metrics.failover_seconds.observe(gap)
        # the journal ends at a handoff: its target never wrote a line of it (never home)
        handed_by = last.event.origin if last and last.event.type == c.JOURNAL_HANDOFF else None
        await self._report_takeover(agent, previous, epoch, gap, handed_by, self._older(placed))

    def _older(self, placed: Placed) -> str:
        """What the finding says of a takeover on the version before an upgrade ("" if not)."""
        latest = self.placements.get(placed.agent)
        if latest is None or latest.definition == placed.definition:
            return ""
        return (
            f" It runs {placed.definition.component}, the version before its upgrade to "
            f"{latest.definition.component}, which was not compiled here yet; it switches to "
            "it once it is."
        )

    async def _report_takeover(
        self,
        agent: str,
        previous: str,
        epoch: int,
        gap: float | None,
        handed_by: str | None,
        older: str = "",
    ) -> None:
        """Every takeover is worth a look: a finding in the agent's journal, naming the home it
        replaced (or the handoff that lapsed: its target never took the agent up) and how
        long the agent wrote nothing."""
        after = f" after {gap:.1f} s without a write" if gap is not None else ""
        if handed_by is not None:
            title = f"agent {agent} taken over: its handoff to {previous} lapsed{after}"
            detail = (
                f"{self.ctx.name} took {agent} over at epoch {epoch}: {handed_by} handed it to "
                f"{previous} in a planned move, and {previous} never took it up (no lease, "
                "nothing written since the handoff: it was draining, stopped, not ready or "
                "not connected). The gap is from the handoff to the takeover."
            )
        else:
            title = f"agent {agent} taken over from {previous}{after}"
            detail = (
                f"{self.ctx.name} took {agent} over at epoch {epoch}: the lease of its home "
                f"{previous} had lapsed (it died, froze or lost NATS). The gap is from "
                f"{previous}'s last envelope to the takeover."
            )
        finding = NewFinding(agent=agent, severity="medium", title=title, detail=detail + older)
        with contextlib.suppress(Exception):  # the takeover stands without its finding
            await report_finding(self.ctx, finding)


def _seconds_between(earlier: str | None, later: str) -> float | None:
    if earlier is None:
        return None
    try:
        gap = datetime.fromisoformat(later) - datetime.fromisoformat(earlier)
    except ValueError:
        return None
    return max(0.0, gap.total_seconds())
