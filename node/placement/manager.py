"""Who runs each placed agent: the node its journal names as home, holding its lease.

A placed agent (its placement set names more than one node, projections/placements.py) runs
on one node of the set, its home, only while that node holds the agent's lease (LeaseBook,
part B). Every node of the set runs this manager's loop on its NATS connection:

- the journal names this node as home (a new agent, a start, a reconnect, a handoff naming
  it): it waits until its copy of the journal holds what the stream holds, takes the lease at
  the journal's epoch and starts the agent (and, after a move, says so: `agent.moved_in`);
  a lease someone else holds leaves it a replica (a node back after kill -9 or SIGSTOP);
- another node is home and its lease is gone: a node that can host the agent (every grant
  domain among its secrets) waits until its copy holds what the stream holds, takes the lease
  at epoch + 1 (create-only: one node wins), appends `journal.takeover`, closes the lost
  home's pending approvals ("node lost"), starts the same definition (its component fetched
  by sha256) with its open tasks, and appends `agent.moved_in`;
- its lease is lost (a renew failed, its validity passed): the agent stops here at once; the
  store's fence (part A) already refuses its writes.

A planned move (`move`) drains the agent, appends `journal.handoff` on the home, waits for its
publish ack and releases the lease; the target then finds itself home (first case above).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from node.context import NodeContext
from node.services.approvals import ApprovalGate
from node.services.deployments import DeploymentService
from node.services.registry import RegistryService
from node.web.http import Problem
from projections import catalogue as c
from projections.journals import Journals
from projections.placements import Placed, Placements
from projections.tasks import Tasks

if TYPE_CHECKING:  # nats-py is an optional extra: imported where the NATS mesh runs
    from nats.js import JetStreamContext

    from node.placement.adverts import NodeAdverts
    from node.placement.components import ComponentStore

from eventstore.writer import Fenced
from node.placement.leases import LeaseBook, LeaseError

log = logging.getLogger("agent-node.placement")
CATCH_UP_SECS = 10.0  # how long a node waits for its copy before it gives up a turn
MOVE_ACK_SECS = 10.0  # the handoff's publish ack
NODE_LOST = "node lost"


@dataclass
class Link:
    """What one NATS connection gives the manager (rebuilt at every reconnect)."""

    js: JetStreamContext
    adverts: NodeAdverts
    components: ComponentStore
    publisher: Any  # node.sync.nats_publisher.NatsPublisher: `wait_published`
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


LinkOpener = Callable[["PlacementManager", "JetStreamContext", Any], Awaitable[Link]]


class PlacementManager:
    def __init__(
        self,
        ctx: NodeContext,
        deployments: DeploymentService,
        approvals: ApprovalGate,
        registry: RegistryService,
    ) -> None:
        self.ctx = ctx
        self.deployments = deployments
        self.approvals = approvals
        self.registry = registry
        self.link: Link | None = None
        # the journal's write fence follows each lease (eventstore: Store.fence)
        self._sealed: set[str] = set()  # handed over: blocked whatever the lease says
        self.leases = LeaseBook(
            ctx.name, ctx.config.mesh, fence=self._fence, on_lost=self.lease_lost
        )
        self.running: set[str] = set()  # placed agents this node runs under its lease
        self._busy: set[str] = set()  # agents a takeover, start or move is working on
        self._absent_since: dict[str, float] = {}  # agent → when its lease was seen gone
        mesh = ctx.config.mesh
        self.check_secs = min(1.0, mesh.lease_ttl_secs / 4)
        deployments.placement = self

    # ------------------------------------------------------------------ reads
    @property
    def placements(self) -> Placements:
        return self.ctx.projections.get(Placements)

    def hold_back(self) -> None:
        """At start: no placed agent runs before this node holds its lease."""
        for placed in self.placements.placed_on(self.ctx.name):
            if placed.agent not in self.running:
                self.deployments.elsewhere.add(placed.agent)
                self.ctx.store.block(placed.agent)  # until its lease is held here

    def view(self, agent: str) -> dict[str, Any] | None:
        """Where a placed agent runs: home, epoch, lease, placement and its moves."""
        placed = self.placements.get(agent)
        if placed is None:
            return None
        journals = self.ctx.projections.get(Journals)
        valid_until = self.leases.valid_until(agent)
        expires = max(0.0, valid_until - time.monotonic()) if valid_until is not None else None
        return {
            "home": journals.home_of(agent),
            "epoch": journals.epoch_of(agent),
            "lease": {"holder": self.ctx.name, "expires_in": expires}
            if agent in self.running
            else None,
            "placement": list(placed.placement),
            "moves": journals.moves_of(agent),
        }

    def _fence(self, journal: str, deadline: float | None) -> None:
        """The lease's write fence, except for a journal this node handed over: a renew
        between the handoff and the release must not lift its block."""
        if journal not in self._sealed:
            self.ctx.store.fence(journal, deadline)

    # ------------------------------------------------------------------ deployments' hooks
    async def share(self, name: str, definition: c.AgentDefinition, path: Path) -> None:
        link = self._linked()
        await link.components.put(path, definition.sha256.removeprefix("sha256:"))

    async def claim(self, name: str) -> None:
        self._linked()
        try:
            if await self.leases.acquire(name, 0) is None:
                holder = await self.leases.holder(name)
                raise Problem(
                    409, f"agent {name!r} is leased by {holder.holder if holder else '?'}"
                )
        except LeaseError as exc:
            raise Problem(503, f"the lease of {name!r} could not be taken: {exc}") from None

    def started_here(self, name: str) -> None:
        self.running.add(name)

    async def confirm(self, agent: str) -> None:
        """A write to a placed agent's journal that this node acknowledges (an API answer)
        counts only once the stream holds it, before the lease's validity ends: wait for the
        publish ack of the journal's head, else 503 (the write may be lost in a failover)."""
        if agent not in self.running:
            return
        head = self.ctx.store.head(agent)
        valid_until = self.leases.valid_until(agent)
        link = self.link
        if head is None:
            return
        if link is None or valid_until is None:
            raise Problem(503, f"{agent!r}: the write is not acknowledged (no NATS link now)")
        wait = min(MOVE_ACK_SECS, valid_until - time.monotonic())
        published = wait > 0 and await link.publisher.wait_published(agent, head.seq, wait)
        still = self.leases.valid_until(agent)  # renewed meanwhile, or lost
        if not published or still is None or time.monotonic() > still:
            raise Problem(
                503,
                f"{agent!r}: the write was not acknowledged by the mesh's stream before the "
                "lease's validity ended; it may be lost if the agent fails over",
            )

    def _linked(self) -> Link:
        if self.link is None:
            raise Problem(503, "placement needs the NATS mesh, which is not connected")
        return self.link

    # ------------------------------------------------------------------ the loop
    async def supervise(self, mesh: Any, open_link: LinkOpener) -> None:
        """Follow the node's NATS connection (node/sync/nats_mesh.py): a Link and the loop
        for each connection, rebuilt after a reconnect (a lease's callbacks die with it)."""
        renewing = asyncio.create_task(self.leases.run(), name="placement-leases")
        try:
            while True:
                await self._follow(mesh, open_link)
        finally:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing

    async def _follow(self, mesh: Any, open_link: LinkOpener) -> None:
        """One connection's turn: attach, serve until the connection changes."""
        js = mesh.js
        if js is None or mesh.publisher is None:
            self.leases.detach()
            await asyncio.sleep(self.check_secs)
            return
        try:
            await self.leases.attach(js)
            link = await open_link(self, js, mesh.publisher)
        except Exception as exc:  # the next connection tries again
            log.warning("placement: %s: %s", type(exc).__name__, exc)
            await asyncio.sleep(self.check_secs)
            return
        serving = asyncio.create_task(self.serve(link), name="placement")
        try:
            while mesh.js is js and not serving.done():
                await asyncio.sleep(self.check_secs)
        finally:
            for task in (serving, *link.tasks):
                task.cancel()
            for task in (serving, *link.tasks):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if serving.done() and not serving.cancelled() and serving.exception():
            log.warning("placement loop ended: %s", serving.exception())

    async def serve(self, link: Link) -> None:
        """Run for one NATS connection: look at every placed agent every `check_secs`."""
        self.link = link
        try:
            while True:
                for placed in self.placements.placed_on(self.ctx.name):
                    if placed.agent not in self._busy:
                        await self._consider(link, placed)
                await asyncio.sleep(self.check_secs)
        finally:
            self.link = None

    async def _consider(self, link: Link, placed: Placed) -> None:
        agent = placed.agent
        if agent in self.running:
            return
        home = self.ctx.projections.get(Journals).home_of(agent)
        self._busy.add(agent)
        try:
            if home in (None, self.ctx.name):
                await self._become_home(link, placed)
            elif self._can_host(placed) and await self._lease_gone(placed):
                await self._take_over(link, placed, str(home))
        except Problem as exc:
            log.warning("placement of %s: %s", agent, exc.detail)
        except (LeaseError, TimeoutError, Fenced) as exc:
            log.info("placement of %s: %s: %s", agent, type(exc).__name__, exc)
        except Exception:  # one agent's failure never stops the others' placement
            log.exception("placement of %s failed", agent)
        finally:
            self._busy.discard(agent)

    async def _lease_gone(self, placed: Placed) -> bool:
        """Nobody holds the lease, and a node a handoff named had its chance: for a whole TTL
        after the lease was first seen gone (it takes the lease right after the handoff)."""
        agent = placed.agent
        if await self.leases.holder(agent) is not None:
            self._absent_since.pop(agent, None)
            return False
        since = self._absent_since.setdefault(agent, time.monotonic())
        moves = self.ctx.projections.get(Journals).moves_of(agent)
        handed = bool(moves) and moves[-1]["reason"] == "handoff"
        if handed and placed.moved_in_epoch < int(moves[-1]["epoch"]):
            return time.monotonic() - since >= self.leases.ttl
        return True

    def _can_host(self, placed: Placed) -> bool:
        """Every grant domain of the agent is one this node has secrets for."""
        return set(placed.definition.grant_domains) <= set(self.ctx.config.secrets)

    def _epoch(self, agent: str) -> int:
        return self.ctx.projections.get(Journals).epoch_of(agent)

    async def _lease_floor(self, link: Link) -> int:
        """The leases bucket's last sequence: above the epoch of every lease granted so far.
        A takeover's epoch is higher still, so two nodes that each took the journal over
        after a home they did not know of (the first died before its takeover reached the
        stream) never sign the same epoch: the later one wins the fork everywhere."""
        from node.sync.nats_subjects import Bucket, bucket_name, kv_stream

        stream = kv_stream(bucket_name(self.ctx.config.mesh.name, Bucket.LEASES))
        info = await asyncio.wait_for(link.js.stream_info(stream), CATCH_UP_SECS)
        return int(info.state.last_seq)

    async def _caught_up(self, link: Link, placed: Placed) -> bool:
        from node.placement.catchup import caught_up

        deadline = time.monotonic() + CATCH_UP_SECS
        return await caught_up(self.ctx, link.js, placed.agent, placed.placement, deadline)

    async def _become_home(self, link: Link, placed: Placed) -> None:
        """The journal names this node: run the agent once the lease is ours."""
        agent, epoch = placed.agent, self._epoch(placed.agent)
        if not await self._caught_up(link, placed):
            log.info("agent %s: this node's copy is behind the stream; not starting yet", agent)
            return
        if self.ctx.projections.get(Journals).home_of(agent) not in (None, self.ctx.name):
            return  # a takeover arrived while catching up
        self._sealed.discard(agent)  # handed back to this node: its lease fences it again
        if await self.leases.acquire(agent, epoch) is None:
            log.info("agent %s: its lease is held by another node; staying a replica", agent)
            return  # held: by the node that took over (its takeover is on its way), or ours
        await self._start(link, placed)
        if epoch > 0 and placed.moved_in_epoch < epoch:
            await self._moved_in(agent, epoch, "handoff")

    async def _take_over(self, link: Link, placed: Placed, previous: str) -> None:
        agent = placed.agent
        if not await self._caught_up(link, placed):
            return
        # what the stream held may change the picture: a handoff published before the lease
        # was released (its target has its turn first), or a takeover by another node
        fresh = self.placements.get(agent)
        home = self.ctx.projections.get(Journals).home_of(agent)
        if fresh is None or home != previous or not await self._lease_gone(fresh):
            return
        placed, epoch = fresh, max(self._epoch(agent), await self._lease_floor(link)) + 1
        self._sealed.discard(agent)  # this node handed it over once: its lease fences it again
        lease = await self.leases.acquire(agent, epoch)
        if lease is None:
            return  # another node of the set won
        revision = lease.revision
        log.warning("agent %s: lease of %s expired; taking over (epoch %d)", agent, previous, epoch)
        takeover = c.JournalTakeover(epoch=epoch, lease_revision=revision, previous_home=previous)
        await self.ctx.store.append(agent, *c.event_of(takeover))
        abandoned = await self.approvals.abandon_agent(agent, NODE_LOST)
        await self._start(link, placed)
        await self._moved_in(agent, epoch, "takeover", previous, len(abandoned))

    async def _start(self, link: Link, placed: Placed) -> None:
        """Run the agent here under the lease just taken; if it cannot start (its component
        missing or refused, the registry holding other bytes under its version), the lease is
        given back at once so that another node of the set can take it."""
        try:
            await self._run_here(link, placed)
        except BaseException:
            with contextlib.suppress(LeaseError, TimeoutError):
                await self.leases.release(placed.agent)
            raise

    async def _run_here(self, link: Link, placed: Placed) -> None:
        definition = placed.definition
        try:
            path = self.registry.resolve(definition.component)
        except LookupError:
            await self._fetch(link, placed)
        else:  # the home shares what it runs (a runtime.toml agent's component, say)
            try:
                await self.share(placed.agent, definition, path)
            except Exception as exc:  # the agent runs; a takeover would lack its component
                log.warning("agent %s: its component is not shared: %s", placed.agent, exc)
        await self.deployments.host_placed(placed.agent, definition)
        self.running.add(placed.agent)
        log.info("agent %s runs here (epoch %d)", placed.agent, self._epoch(placed.agent))

    async def _fetch(self, link: Link, placed: Placed) -> None:
        """The component by its sha256 (verified by ComponentStore), into the registry."""
        definition = placed.definition
        tmp = self.registry.tmp / f"fetch-{definition.sha256.removeprefix('sha256:')}"
        try:
            fetched = await link.components.fetch(definition.sha256.removeprefix("sha256:"), tmp)
            await self.registry.adopt(
                definition.component, definition.sha256, fetched, definition.description
            )
        finally:
            tmp.unlink(missing_ok=True)

    async def _moved_in(
        self,
        agent: str,
        epoch: int,
        reason: str,
        from_node: str = "",
        abandoned: int = 0,
    ) -> None:
        open_tasks = len(self.ctx.projections.get(Tasks).open_tasks(agent))
        moves = self.ctx.projections.get(Journals).moves_of(agent)
        if not from_node and moves:
            from_node = str(moves[-1]["from"])
        moved_in = c.AgentMovedIn(
            epoch=epoch,
            from_node=from_node,
            reason=reason,  # type: ignore[arg-type]
            open_tasks=open_tasks,
            abandoned_approvals=abandoned,
        )
        await self.ctx.store.append(agent, *c.event_of(moved_in))

    # ------------------------------------------------------------------ lease lost
    def lease_lost(self, agent: str, reason: str) -> None:
        """LeaseBook's callback: stop the agent here now (its writes are fenced already)."""
        if agent in self.running:
            self.running.discard(agent)
            log.error("agent %s: lease lost (%s); stopped here", agent, reason)
            asyncio.get_running_loop().create_task(
                self.deployments.unhost_placed(agent, f"lease lost ({reason})", 0.0)
            )

    # ------------------------------------------------------------------ planned move
    async def move(self, agent: str, to: str) -> dict[str, Any]:
        """Hand `agent` over to node `to` (checked: 409/422), signed by this node."""
        link = self._linked()
        placed = self.placements.get(agent)
        if placed is None or len(placed.placement) < 2:
            raise Problem(409, f"agent {agent!r} is not placed on more than one node")
        home = self.ctx.projections.get(Journals).home_of(agent)
        if home != self.ctx.name or agent not in self.running:
            raise Problem(409, f"agent {agent!r} runs on node {home!r}; ask it to move it")
        if to == self.ctx.name:
            raise Problem(409, f"agent {agent!r} runs on {to!r} already")
        if to not in placed.placement:
            raise Problem(
                422,
                f"node {to!r} is not in the placement set of {agent!r} "
                f"({', '.join(placed.placement)})",
            )
        try:
            adverts = await link.adverts.live([to])
        except Exception as exc:  # NATS did not answer: not knowing is no advert
            raise Problem(503, f"the nodes' adverts could not be read: {exc}") from None
        if to not in adverts:
            raise Problem(409, f"node {to!r} has no fresh advert: it is not connected")
        missing = set(placed.definition.grant_domains) - set(adverts[to].domains)
        if missing:
            raise Problem(
                422,
                f"node {to!r} lacks the grant domains of {agent!r}: {', '.join(sorted(missing))}",
            )
        if agent in self._busy:
            raise Problem(409, f"agent {agent!r} is being moved or started already")
        self._busy.add(agent)
        try:
            return await self._hand_off(link, agent, to)
        finally:
            self._busy.discard(agent)

    async def _hand_off(self, link: Link, agent: str, to: str) -> dict[str, Any]:
        started = time.monotonic()
        epoch = self._epoch(agent) + 1
        self.running.discard(agent)
        await self.deployments.unhost_placed(agent, f"moved to {to}", self.deployments.drain_secs)
        self._sealed.add(agent)
        # the last envelope this node writes: a finding or task queued behind it is refused
        envelope = await self.ctx.store.append_sealing(
            agent, *c.event_of(c.JournalHandoff(to=to, epoch=epoch))
        )
        published = await link.publisher.wait_published(agent, envelope.seq, MOVE_ACK_SECS)
        # released either way: this node wrote its last envelope; if the stream never gets
        # the handoff, a node of the set takes over once the lease is gone (a fork that the
        # takeover's higher epoch resolves on this node)
        await self.leases.release(agent)
        if not published:
            raise Problem(
                503,
                f"the handoff of {agent!r} was not acknowledged by the stream in time; its "
                "lease is released, so a node of its set takes it over",
            )
        return {
            "agent": agent,
            "to": to,
            "epoch": epoch,
            "handoff_seq": envelope.seq,
            "drained_in_s": round(time.monotonic() - started, 3),
        }
