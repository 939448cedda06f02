"""Who runs each placed agent: the node its journal names as home, holding its lease there.

A placed agent (its placement set names more than one node, projections/placements.py) runs on
one node of the set, its home, only while that node holds its lease (node/placement/leases.py:
a signed record under the node's own key, renewed every quarter of the TTL; the journal's write
fence follows it). Every node of the set runs this manager's loop on its NATS connection:

- whether it may host the agent at all is its own operator's (consent.py): without consent it
  keeps a replica of the journal and never runs it; with consent the agent runs here with the
  definition bounded by it, and its component is fetched and compiled ahead of need
  (prepare.py), so a takeover never waits for a compile;
- the journal names this node as home (a new agent, a restart, a handoff naming it): once its
  copy holds what the stream holds and no other node wrote after this node's tenure began, it
  owns the journal again, takes its lease and starts the agent (after a move, `agent.moved_in`);
- another node is home and its lease is gone (no live record at the journal's epoch: it died,
  froze or lost NATS): a node that may host the agent claims the next epoch (its own lease
  record at epoch + 1) and, when its claim is the first one written (the lowest revision among
  the set's records at that epoch), catches up with the stream, appends `journal.takeover`,
  closes the lost home's pending approvals ("node lost"), starts the agent with its open tasks
  and appends `agent.moved_in`. A claim that came first but led to no takeover within a TTL is
  ignored from then on (and reported), so a member cannot hold an agent down by claiming;
- the journal names another node while the agent runs here (a takeover or handoff received):
  it stops at once, the journal stays disowned (no local append, whatever a renewal says) and
  its lease is given up; a lost lease stops it too (its writes are fenced already).

A planned move (`move`) drains the agent, appends `journal.handoff` (disowning the journal),
waits for its publish ack and releases the lease; the target then finds itself home. The node
that handed an agent over never takes it back by itself unless the target took it and then
lapsed, or never took it for HANDOFF_RETURN_TTLS lease TTLs.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from eventstore.writer import Fenced
from node.context import NodeContext
from node.placement.adverts import served_domains
from node.placement.buckets import BucketError
from node.placement.components import ComponentError, ComponentRefused
from node.placement.consent import Consent, consent_of
from node.placement.judge import TakeoverJudge
from node.placement.leases import RENEW_SHARE, LeaseBook, LeaseError
from node.placement.metrics import PlacementMetrics
from node.placement.prepare import Preparer
from node.services.approvals import ApprovalGate
from node.services.deployments import DeploymentService
from node.services.findings import NewFinding, report_finding
from node.services.registry import RegistryService
from node.web.http import Problem
from projections import catalogue as c
from projections.deployments import DeployedAgents
from projections.journals import Journals
from projections.placements import Placed, Placements
from projections.tasks import Tasks

if TYPE_CHECKING:  # nats-py is an optional extra: imported where the NATS mesh runs
    from nats.js import JetStreamContext

    from node.placement.adverts import NodeAdverts
    from node.placement.components import ComponentStore
    from node.sync.service import SyncService

log = logging.getLogger("agent-node.placement")
CATCH_UP_SECS = 10.0  # how long a node waits for its copy before it gives up a turn
MOVE_ACK_SECS = 10.0  # the handoff's publish ack
NODE_LOST = "node lost"
HANDOFF_RETURN_TTLS = 3  # the old home waits this many TTLs for a target that never took it
SHARE_CHECK_SECS = 60.0  # the home checks the mesh still serves its agents' components
DRAIN_SECS = 20.0  # a drain (`node drain`, SIGTERM) hands agents over within this long
MIN_DRAIN_SECS, MAX_DRAIN_SECS = 0.1, 300.0  # what `POST /node/drain?within_s=` may ask


@dataclass
class Link:
    """What one NATS connection gives the manager (rebuilt at every reconnect)."""

    js: JetStreamContext
    adverts: NodeAdverts
    components: ComponentStore
    publisher: Any  # node.sync.nats_publisher.NatsPublisher: `wait_published`
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


LinkOpener = Callable[["PlacementManager", "JetStreamContext", Any], Awaitable[Link]]


@dataclass
class _Claims:
    """What this node saw of other nodes' claims to one agent's next epoch."""

    epoch: int
    first_seen: dict[str, float] = field(default_factory=dict)  # node → when it led
    ignored: set[str] = field(default_factory=set)  # led for a TTL without taking over


class PlacementManager:
    def __init__(
        self,
        ctx: NodeContext,
        deployments: DeploymentService,
        approvals: ApprovalGate,
        registry: RegistryService,
        sync: SyncService,
    ) -> None:
        self.ctx = ctx
        self.deployments = deployments
        self.approvals = approvals
        self.registry = registry
        self.sync = sync
        self.link: Link | None = None
        self.leases = LeaseBook(
            ctx.name,
            ctx.config.mesh,
            ctx.key,
            sync.keys.lookup,
            fence=ctx.store.fence,
            on_lost=self.lease_lost,
            on_junk=self._junk,
        )
        self.metrics = PlacementMetrics(ctx.metrics.registry)
        # the judge reads the mesh as soon as the node is connected (before this manager's
        # link: a restarted node's consumer delivers a takeover at once)
        self.judge = TakeoverJudge(ctx, self.leases, self._nats_js, self.metrics)
        self.prepare = Preparer(registry, self._engine)
        self.running: set[str] = set()  # placed agents this node runs under its lease
        self._busy: set[str] = set()  # agents a takeover, start or move is working on
        self._gone_since: dict[str, float] = {}  # agent → when its home's lease was seen gone
        self._seen_live: dict[str, int] = {}  # agent → epoch its home's lease was last seen at
        self._handed: dict[str, tuple[int, float]] = {}  # agent → (epoch, when) we handed over
        self._claims: dict[str, _Claims] = {}
        self._refused: dict[str, str] = {}  # agent → why this node does not host it (logged once)
        self._shared_at: dict[str, float] = {}
        self._background: set[asyncio.Task[None]] = set()
        self.unusable = ""  # why a placement bucket cannot be used (BucketError), if one cannot
        self.draining = False  # drained: this node takes no placed agent until it restarts
        mesh = ctx.config.mesh
        self.check_secs = min(1.0, mesh.lease_ttl_secs / 4)
        deployments.placement = self
        sync.receiver.judge = self.judge
        sync.receiver.on_moved = self.journal_moved
        self._wake = asyncio.Event()  # a move named this node: look at once, not next turn

    def _in_background(self, work: Awaitable[None]) -> None:
        """Run `work` after this call returns (a callback cannot await): kept referenced
        until done, its failure logged."""

        async def logged() -> None:
            try:
                await work
            except Exception:
                log.exception("placement: background work failed")

        task = asyncio.get_running_loop().create_task(logged())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _nats_js(self) -> Any:
        nats = self.sync.nats
        return nats.js if nats is not None else None

    def _engine(self) -> Any:
        """The runtime's engine (None while the runtime is not running)."""
        try:
            return self.deployments.runtime.engine
        except Problem:
            return None

    # ------------------------------------------------------------------ reads
    @property
    def placements(self) -> Placements:
        return self.ctx.projections.get(Placements)

    @property
    def journals(self) -> Journals:
        return self.ctx.projections.get(Journals)

    def hold_back(self) -> None:
        """At start: no placed agent runs before this node holds its lease, and a journal
        homed elsewhere is disowned here."""
        for placed in self.placements.placed_on(self.ctx.name):
            if placed.agent in self.running:
                continue
            self.deployments.elsewhere.add(placed.agent)
            if self.journals.home_of(placed.agent) in (None, self.ctx.name):
                self.ctx.store.block(placed.agent)  # until its lease is held here
            else:
                self.ctx.store.disown(placed.agent)

    async def view(self, agent: str) -> dict[str, Any] | None:
        """Where a placed agent runs, as this node's copy of its journal and the mesh say:
        home, epoch, this node's lease (if it holds it), the home's lease as the bucket has it
        (`home_lease`; `suspect` when it is gone or about to lapse), the set and the members
        of it ready to take it now (`candidates`), whether an operator stopped it, the
        revision it runs, its moves and its deployments across homes."""
        placed = self.placements.get(agent)
        if placed is None:
            return None
        home = self.journals.home_of(agent)
        valid_until = self.leases.valid_until(agent)
        expires = max(0.0, valid_until - time.monotonic()) if valid_until is not None else None
        home_lease, candidates = await self._observed(agent, home, placed)
        suspect = home_lease is None or home_lease["expires_in"] < self.leases.ttl * RENEW_SHARE
        return {
            "home": home,
            "epoch": self.journals.epoch_of(agent),
            "lease": {"holder": self.ctx.name, "expires_in": expires}
            if agent in self.running
            else None,
            "home_lease": home_lease,
            "suspect": suspect and agent not in self.running,
            "candidates": candidates,
            "placement": list(placed.placement),
            "stopped_by": placed.stopped_by if placed.stopped else None,
            "revision": placed.revision,
            "moves": self.journals.moves_of(agent),
            "history": [msgspec.to_builtins(change) for change in placed.history],
        }

    async def _observed(
        self, agent: str, home: str | None, placed: Placed
    ) -> tuple[dict[str, Any] | None, list[str]]:
        """The home's lease record and the set's members ready to host the agent, as the
        mesh has them now (nothing when it does not answer within a second)."""
        link = self.link
        if link is None or home is None:
            return None, []
        lease: dict[str, Any] | None = None
        ready: list[str] = []
        with contextlib.suppress(Exception):
            async with asyncio.timeout(1.0):
                view = await self.leases.peek(agent, home)
                if view is not None and view.epoch == self.journals.epoch_of(agent):
                    lease = {"expires_in": round(view.expires_in, 3), "revision": view.revision}
                others = [n for n in placed.placement if n != home]
                live = await link.adverts.live(others)
                ready = sorted(n for n, advert in live.items() if agent in advert.hosts)
        return lease, ready

    # ------------------------------------------------------------------ consent
    def consent(self, agent: str) -> Consent | None:
        deployed = self.ctx.projections.get(DeployedAgents).get(agent)
        return consent_of(self.ctx.config, self.deployments.declared, deployed, agent)

    def refusal(self, placed: Placed) -> str | None:
        """Why this node may not host `placed` (None: it may, once its component is ready)."""
        consent = self.consent(placed.agent)
        if consent is None:
            return (
                "its operator gave no consent (no [[hosting]] entry, [[agents]] entry or "
                "deployment of it here)"
            )
        return consent.refusal(placed.definition, served_domains(self.ctx.config))

    def definition_here(self, placed: Placed) -> c.AgentDefinition:
        """What the agent runs with here: its definition bounded by this node's consent."""
        consent = self.consent(placed.agent)
        assert consent is not None, placed.agent
        return consent.bound(placed.definition)

    def ready_to_host(self) -> list[str]:
        """The placed agents this node would take over or accept in a move now (its advert)."""
        return sorted(
            placed.agent
            for placed in self.placements.placed_on(self.ctx.name)
            if self.refusal(placed) is None and self.prepare.ready(placed.definition)
        )

    # ------------------------------------------------------------------ deployments' hooks
    async def share(self, name: str, definition: c.AgentDefinition, path: Path) -> None:
        """The component in the mesh's store before a deployment names it (else no node of
        the set could fetch it): 503 when the store does not answer, 422 when it refuses it."""
        link = self._linked()
        try:
            await link.components.put(path, definition.sha256.removeprefix("sha256:"))
        except ComponentRefused as exc:
            raise Problem(422, f"the mesh's component store refuses it: {exc}") from None
        except ComponentError as exc:
            raise Problem(503, f"the mesh's component store did not take it: {exc}") from None
        self._shared_at[name] = time.monotonic()

    async def claim(self, name: str) -> None:
        """The lease of a new placed agent, deployed here at epoch 0."""
        self._linked()
        try:
            self.ctx.store.own(name)
            lease = await self.leases.acquire(name, 0)
            self.ctx.store.fence(name, lease.valid_until)
        except LeaseError as exc:
            raise Problem(503, f"the lease of {name!r} could not be taken: {exc}") from None

    def started_here(self, name: str) -> None:
        self.running.add(name)
        placed = self.placements.get(name)
        if placed is not None:
            self.prepare.loaded(placed.definition)

    async def retired(self, name: str) -> None:
        """Removed here, its home (`agent.retired` is in the stream): never run again, and
        the lease given up so that no record of it outlives it."""
        self.running.discard(name)
        self.ctx.store.disown(name)
        with contextlib.suppress(LeaseError, TimeoutError):
            await self.leases.release(name)

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
            if self.unusable:
                raise Problem(503, f"placement cannot run: {self.unusable}")
            raise Problem(503, "placement needs the NATS mesh, which is not connected")
        return self.link

    async def _cannot_run(self, why: str) -> None:
        """A placement bucket this node must not use: said loudly, once per reason."""
        key = f"placement-bucket/{hashlib.sha256(why.encode()).hexdigest()[:16]}"
        if not self.sync.incidents.seen(key):
            log.error("placement cannot run: %s", why)
            await self.sync.incidents.report(key, "critical", "placement cannot run", why)

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

    async def _until_changed(self, mesh: Any) -> None:
        """Until the node's NATS connection changes (or check_secs pass)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(mesh.changed.wait(), self.check_secs)
        mesh.changed.clear()

    async def _follow(self, mesh: Any, open_link: LinkOpener) -> None:
        """One connection's turn: attach, serve until the connection changes."""
        mesh.changed.clear()
        js = mesh.js
        if js is None or mesh.publisher is None:
            self.leases.detach()
            await self._until_changed(mesh)
            return
        try:
            await self.leases.attach(js)
            link = await open_link(self, js, mesh.publisher)
        except BucketError as exc:  # tried again: an operator may delete the bucket
            self.unusable = str(exc)
            await self._cannot_run(self.unusable)
            await asyncio.sleep(max(self.check_secs, 5.0))
            return
        except Exception as exc:  # the next connection tries again
            log.warning("placement: %s: %s", type(exc).__name__, exc)
            await asyncio.sleep(max(self.check_secs, 2.0))
            return
        self.unusable = ""
        serving = asyncio.create_task(self.serve(link), name="placement")
        preparing = asyncio.create_task(self.prepare.run(link.components), name="preparing")
        try:
            while mesh.js is js and not serving.done():
                await self._until_changed(mesh)
        finally:
            for task in (serving, preparing, *link.tasks):
                task.cancel()
            for task in (serving, preparing, *link.tasks):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if serving.done() and not serving.cancelled() and serving.exception():
            log.warning("placement loop ended: %s", serving.exception())

    async def serve(self, link: Link) -> None:
        """Run for one NATS connection: look at every placed agent every `check_secs`."""
        self.link = link
        try:
            while True:
                self.metrics.leases_held.set(len(self.leases.held()))
                await self._forget_retired()
                placed_here = self.placements.placed_on(self.ctx.name)
                self.prepare.forget({p.definition.sha256 for p in placed_here})
                for placed in placed_here:
                    if placed.agent not in self._busy:
                        await self._consider(link, placed)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.check_secs)
                self._wake.clear()
        finally:
            self.link = None

    async def _consider(self, link: Link, placed: Placed) -> None:
        agent = placed.agent
        home = self.journals.home_of(agent)
        if agent in self.running:
            if home not in (None, self.ctx.name):
                self.moved_away(agent, str(home))
            elif time.monotonic() - self._shared_at.get(agent, 0.0) > SHARE_CHECK_SECS:
                self._shared_at[agent] = time.monotonic()
                self._in_background(self._keep_shared(link, placed))
            return
        if self.draining:
            return
        why = self.refusal(placed)
        if why is not None:
            if self._refused.get(agent) != why:
                log.info("placed agent %s is not hosted here: %s", agent, why)
                self._refused[agent] = why
            return
        self._refused.pop(agent, None)
        self.prepare.want(placed.definition)
        if not self.prepare.ready(placed.definition):
            return
        self._busy.add(agent)
        try:
            if home in (None, self.ctx.name):
                await self._become_home(link, placed)
            else:
                await self._maybe_take_over(link, placed, str(home))
        except Problem as exc:
            log.warning("placement of %s: %s", agent, exc.detail)
        except (LeaseError, TimeoutError, Fenced) as exc:
            log.info("placement of %s: %s: %s", agent, type(exc).__name__, exc)
        except Exception:  # one agent's failure never stops the others' placement
            log.exception("placement of %s failed", agent)
        finally:
            self._busy.discard(agent)

    async def _forget_retired(self) -> None:
        """Agents deployed here that were removed on their home since: forgotten here too."""
        deployed = self.ctx.projections.get(DeployedAgents)
        for name, placed in list(self.placements.agents.items()):
            if placed.retired and deployed.get(name) is not None and name not in self._busy:
                home = self.journals.home_of(name) or "?"
                self.running.discard(name)
                await self.deployments.forget_retired(name, home)

    async def _keep_shared(self, link: Link, placed: Placed) -> None:
        """The component of an agent this node runs stays fetchable by the set: a member's
        forged meta is healed by putting it again. In the background (the store bounds how
        long): a re-read of a large component must not hold up the placement of the others."""
        try:
            path = self.registry.resolve(placed.definition.component)
            if await link.components.put(path, placed.definition.sha256.removeprefix("sha256:")):
                log.warning(
                    "placement: the mesh did not serve the component of %s soundly; put again",
                    placed.agent,
                )
        except Exception as exc:  # tried again next time
            log.info("placement: checking the component of %s: %s", placed.agent, exc)

    def _junk(self, agent: str, node: str, why: str) -> None:
        """A record under a member's lease key that is not one: it counts as no lease."""
        key = f"junk-lease/{agent}/{node}"
        if not self.sync.incidents.seen(key):
            self._in_background(
                self.sync.incidents.report(
                    key,
                    "medium",
                    f"junk under node {node}'s lease key for agent {agent}",
                    f"the leases bucket holds, under {node}'s key for {agent}, {why}; "
                    "it is ignored (it counts as no lease)",
                )
            )

    # ------------------------------------------------------------------ home
    async def _caught_up(self, link: Link, placed: Placed) -> bool:
        from node.placement.catchup import caught_up

        deadline = time.monotonic() + CATCH_UP_SECS
        return await caught_up(
            self.ctx, link.js, placed.agent, placed.placement, self.leases.lookup, deadline
        )

    async def _others_wrote_since(self, link: Link, placed: Placed, seq: int) -> int:
        """The highest seq of the journal another node of the set put in the stream, when it
        is `seq` or later (0: none): this node's copy from `seq` on is not the journal."""
        from node.placement.catchup import stream_holds

        others = [n for n in placed.placement if n != self.ctx.name]
        mesh = self.ctx.config.mesh.name
        held = await stream_holds(link.js, mesh, placed.agent, others, self.leases.lookup)
        return held if held >= seq else 0

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
        self.ctx.store.own(agent)
        lease = await self.leases.acquire(agent, epoch)
        self.ctx.store.fence(agent, lease.valid_until)
        await self._start(link, placed)
        if epoch > 0 and placed.moved_in_epoch < epoch:
            await self._moved_in(agent, epoch, "handoff")

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
        if await self._home_live(agent, home, epoch) or not self._grace_over(agent, home, epoch):
            return
        others = [n for n in placed.placement if n not in (home, self.ctx.name)]
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
        placed = fresh
        held = self.ctx.store.head(agent)
        if await self._others_wrote_since(link, placed, (held.seq if held else 0) + 1):
            return  # something newer is in the stream: catch up first
        lease = await self.leases.acquire(agent, epoch + 1)
        leader = await self._claim_leader(agent, others, epoch + 1)
        mine = await self.leases.peek(agent, self.ctx.name)
        if leader is not None and (mine is None or leader.revision < mine.revision):
            await self.leases.release(agent)
            return
        await self._take_over(link, placed, home, epoch + 1, lease.revision)

    async def _claim_leader(self, agent: str, others: list[str], epoch: int) -> Any:
        """The first live claim of `agent`'s epoch by another node of the set, unless that
        node led for a whole TTL without taking over (then it is ignored, and reported)."""
        claims = self._claims.get(agent)
        if claims is None or claims.epoch != epoch:
            claims = self._claims[agent] = _Claims(epoch)
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
        self, link: Link, placed: Placed, previous: str, epoch: int, revision: int
    ) -> None:
        agent = placed.agent
        log.warning("agent %s: lease of %s gone; taking over (epoch %d)", agent, previous, epoch)
        self.ctx.store.own(agent)
        self.ctx.store.fence(agent, self.leases.valid_until(agent) or 0.0)
        takeover = c.JournalTakeover(epoch=epoch, lease_revision=revision, previous_home=previous)
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
        await self._report_takeover(agent, previous, epoch, gap)

    async def _report_takeover(
        self, agent: str, previous: str, epoch: int, gap: float | None
    ) -> None:
        """Every takeover is worth a look: a finding in the agent's journal, naming the home it
        replaced and how long the agent wrote nothing."""
        after = f" after {gap:.1f} s without a write" if gap is not None else ""
        finding = NewFinding(
            agent=agent,
            severity="medium",
            title=f"agent {agent} taken over from {previous}{after}",
            detail=(
                f"{self.ctx.name} took {agent} over at epoch {epoch}: the lease of its home "
                f"{previous} had lapsed (it died, froze or lost NATS). The gap is from "
                f"{previous}'s last envelope to the takeover."
            ),
        )
        with contextlib.suppress(Exception):  # the takeover stands without its finding
            await report_finding(self.ctx, finding)

    async def _start(self, link: Link, placed: Placed) -> None:
        """Run the agent here under the lease just taken; if it cannot start, the lease is
        given back at once so that another node of the set can take it."""
        try:
            await self._run_here(link, placed)
        except BaseException:
            with contextlib.suppress(LeaseError, TimeoutError):
                await self.leases.release(placed.agent)
            raise

    async def _run_here(self, link: Link, placed: Placed) -> None:
        started = time.monotonic()
        await self.deployments.host_placed(placed.agent, self.definition_here(placed))
        self.running.add(placed.agent)
        # shared (healed if a member forged its meta) after the start, not before it
        self._shared_at[placed.agent] = time.monotonic()
        self._in_background(self._keep_shared(link, placed))
        self.prepare.loaded(placed.definition)
        self._gone_since.pop(placed.agent, None)
        self.metrics.leases_held.set(len(self.leases.held()))
        worker = self.deployments.runtime.workers.get(placed.agent)
        if placed.stopped:
            log.info("agent %s is home here, stopped by %s", placed.agent, placed.stopped_by)
        elif worker is not None:
            self._in_background(self._first_run(placed.agent, worker.probation, started))

    async def _first_run(self, agent: str, probation: Any, started: float) -> None:
        """Say the agent runs here once it has run (an instance that starts is not yet one
        that runs): its first good run, or a failed one."""
        epoch = self.journals.epoch_of(agent)
        why = await asyncio.wrap_future(probation)
        took = time.monotonic() - started
        if why is None:
            log.info(
                "agent %s runs here (epoch %d; first run %.1f s after start)", agent, epoch, took
            )
        else:
            log.warning(
                "agent %s started here (epoch %d); its first run failed: %s", agent, epoch, why
            )

    async def _moved_in(
        self,
        agent: str,
        epoch: int,
        reason: str,
        from_node: str = "",
        abandoned: int = 0,
    ) -> None:
        open_tasks = len(self.ctx.projections.get(Tasks).open_tasks(agent))
        moves = self.journals.moves_of(agent)
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

    # ------------------------------------------------------------------ stopping here
    def journal_moved(self, agent: str, home: str) -> None:
        """The receive path accepted a move of `agent`'s journal to `home`: to this node, it
        is looked at now (a planned move's target starts it at once); elsewhere, it stops
        here."""
        if home == self.ctx.name:
            self._wake.set()
        else:
            self.moved_away(agent, home)

    def moved_away(self, agent: str, home: str) -> None:
        """The journal names another home (a move received): stop writing it at once, stop
        the agent, give the lease up. The store refuses its appends already (disowned)."""
        self.ctx.store.disown(agent)
        self.deployments.elsewhere.add(agent)
        if agent not in self.running and agent not in self.leases.held():
            return
        self.running.discard(agent)
        log.warning("agent %s: its journal moved to %s; stopped here", agent, home)
        self._in_background(self._give_up(agent, f"moved to {home}"))

    async def _give_up(self, agent: str, reason: str) -> None:
        with contextlib.suppress(LeaseError, TimeoutError):
            await self.leases.release(agent)
        await self.deployments.unhost_placed(agent, reason, 0.0)

    def lease_lost(self, agent: str, reason: str) -> None:
        """LeaseBook's callback: stop the agent here now (its writes are fenced already)."""
        if agent in self.running:
            self.running.discard(agent)
            log.error("agent %s: lease lost (%s); stopped here", agent, reason)
            self._in_background(
                self.deployments.unhost_placed(agent, f"lease lost ({reason})", 0.0)
            )

    # ------------------------------------------------------------------ drain
    async def drain(self, within: float = DRAIN_SECS) -> list[dict[str, Any]]:
        """Hand each placed agent this node runs to a live member of its set that is ready to
        host it (the one with the most free slots), one after another within `within`
        seconds; one that no member can take, or left when the time is up, has its lease
        given up, so that a takeover follows at once rather than a TTL later. From then on
        this node takes no placed agent (until it restarts). What happened to each agent."""
        self.draining = True
        deadline = time.monotonic() + within
        outcomes: list[dict[str, Any]] = []
        for agent in sorted(self.running):
            outcome: dict[str, Any] = {"agent": agent, "to": None, "epoch": None}
            to = await self._drain_target(agent) if time.monotonic() < deadline else None
            if to is not None:
                try:
                    async with asyncio.timeout(max(0.1, deadline - time.monotonic())):
                        moved = await self.move(agent, to)
                    outcomes.append(outcome | {"to": to, "epoch": moved["epoch"], "done": "moved"})
                    continue
                except (Problem, TimeoutError) as exc:
                    outcome["why"] = getattr(exc, "detail", None) or "the time was up"
            self.running.discard(agent)  # not moved (a handoff cut short included): given up
            await self._give_up(agent, "node drained")
            outcomes.append(outcome | {"done": "released"})
        return outcomes

    async def _drain_target(self, agent: str) -> str | None:
        placed, link = self.placements.get(agent), self.link
        if placed is None or link is None:
            return None
        others = [n for n in placed.placement if n != self.ctx.name]
        try:
            live = await link.adverts.live(others)
        except Exception:  # no adverts known: its lease is given up instead
            return None
        ready = [advert for advert in live.values() if agent in advert.hosts]
        ready.sort(key=lambda advert: (-advert.free_slots, advert.node))
        return ready[0].node if ready else None

    # ------------------------------------------------------------------ planned move
    async def move(self, agent: str, to: str) -> dict[str, Any]:
        """Hand `agent` over to node `to` (checked: 409/422), signed by this node."""
        try:
            return await self._move(agent, to)
        except Problem as exc:
            if exc.status != 503:
                self.metrics.move_refusals.labels(str(exc.status)).inc()
            raise

    async def _move(self, agent: str, to: str) -> dict[str, Any]:
        link = self._linked()
        placed = self.placements.get(agent)
        if placed is None or len(placed.placement) < 2:
            raise Problem(409, f"agent {agent!r} is not placed on more than one node")
        home = self.journals.home_of(agent)
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
        if agent not in adverts[to].hosts:
            raise Problem(
                422,
                f"node {to!r} is not ready to host {agent!r}: its operator gave no consent, "
                "it lacks the agent's grant domains, or its component is not compiled there "
                "yet (see that node's log)",
            )
        if agent in self._busy:
            raise Problem(409, f"agent {agent!r} is being moved or started already")
        self._busy.add(agent)
        try:
            moved = await self._hand_off(link, agent, to)
        except Problem:
            self.metrics.move_refusals.labels("not_acknowledged").inc()
            raise
        finally:
            self._busy.discard(agent)
        self.metrics.moves.inc()
        return moved

    async def _hand_off(self, link: Link, agent: str, to: str) -> dict[str, Any]:
        started = time.monotonic()
        epoch = self.journals.epoch_of(agent) + 1
        self.running.discard(agent)
        try:
            await self.deployments.unhost_placed(
                agent, f"moved to {to}", self.deployments.drain_secs
            )
            # the last envelope this node writes (the store disowns the journal as it stages
            # it): a finding or task queued behind it is refused
            envelope = await self.ctx.store.append_sealing(
                agent, *c.event_of(c.JournalHandoff(to=to, epoch=epoch))
            )
            self._handed[agent] = (epoch, time.monotonic())
            published = await link.publisher.wait_published(agent, envelope.seq, MOVE_ACK_SECS)
        finally:
            # released whatever happened, a cancel (a drain's deadline) included: the agent is
            # stopped here, so a lease kept renewed would hold it down; if the stream never
            # gets the handoff, a node of the set takes over at once (a fork that the
            # takeover resolves on this node)
            with contextlib.suppress(LeaseError, TimeoutError):
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


def _seconds_between(earlier: str | None, later: str) -> float | None:
    if earlier is None:
        return None
    try:
        gap = datetime.fromisoformat(later) - datetime.fromisoformat(earlier)
    except ValueError:
        return None
    return max(0.0, gap.total_seconds())
