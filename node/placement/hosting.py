"""What every job of the placement manager shares: its state, whether this node may host a
placed agent (its operator's consent), running one here and stopping it.

The manager's jobs are each a module: the loop that looks at every placed agent on each NATS
connection (manager.py), becoming home and taking over (takeover.py), planned moves and drains
(moves.py). Each is a class over this one, so they share one set of books.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from node.context import NodeContext
from node.placement.adverts import served_domains
from node.placement.catchup import caught_up, written_ahead
from node.placement.consent import Consent, consent_of
from node.placement.judge import TakeoverJudge
from node.placement.leases import LeaseBook, LeaseError
from node.placement.metrics import PlacementMetrics
from node.placement.prepare import Preparer
from node.placement.standby import prepared_key
from node.services.approvals import ApprovalGate
from node.services.deployments import DeploymentService
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
    from node.placement.leaselog import Logged
    from node.sync.service import SyncService

log = logging.getLogger("agent-node.placement")
CATCH_UP_SECS = 10.0  # how long a node waits for its copy before it gives up a turn
MOVE_ACK_SECS = 10.0  # the handoff's publish ack
NODE_LOST = "node lost"
SHARE_CHECK_SECS = 60.0  # the home checks the mesh still serves its agents' components


@dataclass
class Link:
    """What one NATS connection gives the manager (rebuilt at every reconnect)."""

    js: JetStreamContext
    adverts: NodeAdverts
    components: ComponentStore
    publisher: Any  # node.sync.nats.publisher.NatsPublisher: `wait_published`
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


@dataclass
class Claims:
    """What this node saw of other nodes' claims to one agent's next epoch."""

    epoch: int
    first_seen: dict[str, float] = field(default_factory=dict)  # node → when it led
    ignored: set[str] = field(default_factory=set)  # led for a TTL without taking over


class Hosting:
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
        # agent → (this node's acquire record's position, its first renewal seen stamped over a
        # TTL after it): what a named home under a claim waits for its consumer to read through
        self._late_renewal: dict[str, tuple[int, Logged]] = {}
        # agent → (that acquire record's position, the claimant): the wait is logged once
        self._wait_logged: dict[str, tuple[int, str]] = {}
        self._handed: dict[str, tuple[int, float]] = {}  # agent → (epoch, when) we handed over
        self._claims: dict[str, Claims] = {}
        self._refused: dict[str, str] = {}  # agent → why this node does not host it (logged once)
        self._shared_at: dict[str, float] = {}
        self._background: set[asyncio.Task[None]] = set()
        self.unusable = ""  # why a placement bucket cannot be used (BucketError), if one cannot
        self.draining = False  # drained: this node takes no placed agent until it restarts
        mesh = ctx.config.mesh
        self.check_secs = min(1.0, mesh.lease_ttl_secs / 4)
        sync.receiver.judge = self.judge
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
        owner = self.journals.owner_of(placed.agent)
        served = served_domains(self.ctx.config)
        return consent.refusal(placed.definition, served, owner, self.ctx.name)

    def definition_here(self, placed: Placed) -> c.AgentDefinition:
        """What the agent runs with here: its definition bounded by this node's consent."""
        consent = self.consent(placed.agent)
        assert consent is not None, placed.agent
        return consent.bound(placed.definition)

    def ready_to_host(self) -> list[str]:
        """The placed agents this node would take over or accept in a move now on their
        definition (its advert's `hosts`; a standby on the version before is not listed: a
        node ready on the current one comes first, takeover.py)."""
        return sorted(
            placed.agent
            for placed in self.placements.placed_on(self.ctx.name)
            if self.refusal(placed) is None and self.prepare.ready(placed.definition)
        )

    def runnable(self, placed: Placed) -> Placed | None:
        """`placed` as this node would run it now: its definition when that is ready here,
        else its previous definition (an upgrade whose new version is not compiled here yet:
        a standby on the old one, issue 52) when that one is, else None."""
        if self.refusal(placed) is not None:
            return None
        if self.prepare.ready(placed.definition):
            return placed
        previous = placed.previous
        if previous is None or not self.prepare.ready(previous):
            return None
        older = msgspec.structs.replace(placed, definition=previous)
        return older if self.refusal(older) is None else None

    def prepared_here(self) -> list[str]:
        """`agent=sha256:...` of the definitions ready here: each hosted agent's placed one
        and the one an upgrade prepares (its advert's `prepared`: the home waits for one
        such node before it switches, and a drain hands the agent to one, targets.py)."""
        ready = set()
        for placed in self.placements.placed_on(self.ctx.name):
            if self.refusal(placed) is not None:
                continue  # a node that would not host it claims no version of it
            for definition in (placed.definition, placed.preparing):
                if definition is not None and self.prepare.ready(definition):
                    ready.add(prepared_key(placed.agent, definition))
        return sorted(ready)

    def preparing_here(self) -> list[str]:
        """What this node is fetching or compiling to stand by for: the agent's name (its
        placed definition) or `agent=sha256:...` (an upgrade's). Its advert's `preparing`: a
        home waiting for a standby waits for such nodes, not for ones that never will be."""
        pending = []
        for placed in self.placements.placed_on(self.ctx.name):
            if self.refusal(placed) is not None:
                continue
            if self.prepare.pending(placed.definition):
                pending.append(placed.agent)
            preparing = placed.preparing
            if preparing is not None and self.prepare.pending(preparing):
                pending.append(prepared_key(placed.agent, preparing))
        return sorted(pending)

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

    # ------------------------------------------------------------------ running here
    async def _caught_up(self, link: Link, placed: Placed) -> bool:
        deadline = time.monotonic() + CATCH_UP_SECS
        return await caught_up(
            self.ctx, link.js, placed.agent, placed.placement, self.leases.lookup, deadline
        )

    async def _others_wrote_since(self, link: Link, placed: Placed, seq: int) -> int:
        """The highest seq of the journal another node of the set put in the stream and this
        node did not refuse, when it is `seq` or later (0: none): this node's copy from `seq`
        on is not the journal (catchup.written_ahead)."""
        others = [n for n in placed.placement if n != self.ctx.name]
        return await written_ahead(self.ctx, link.js, placed.agent, others, self.leases.lookup, seq)

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
        latest = self.placements.get(placed.agent)
        if latest is not None and latest.definition != placed.definition:
            log.warning(
                "agent %s runs here on %s, the version before its upgrade to %s, which is "
                "not compiled here yet; it switches to it once it is",
                placed.agent,
                placed.definition.component,
                latest.definition.component,
            )
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

    def _behind(self, placed: Placed) -> bool:
        """This home runs an older definition than the journal's (it took the agent over
        while the new one was not compiled here)."""
        deployed = self.ctx.projections.get(DeployedAgents).get(placed.agent)
        previous = placed.previous
        if (
            deployed is None
            or previous is None
            or placed.agent in self.deployments.rollouts.changes  # a change of its own
            or self.refusal(placed) is not None
        ):
            return False
        runs = deployed.current.definition
        # it runs the version before the journal's: what a takeover on the old one started
        return (runs.component, runs.sha256) == (previous.component, previous.sha256) and (
            runs.component,
            runs.sha256,
        ) != (placed.definition.component, placed.definition.sha256)

    async def _resume_upgrade(self, placed: Placed) -> None:
        """The journal's definition is ready here now: the upgrade the takeover ran ahead of
        is carried out (the same path a takeover takes: the new definition, the instance
        replaced); the caller marked the agent busy."""
        agent = placed.agent
        try:
            log.info(
                "agent %s: %s is compiled here now; switching to it", agent,
                placed.definition.component,
            )  # fmt: skip
            await self.deployments.host_placed(agent, self.definition_here(placed))
            self.prepare.loaded(placed.definition)
        finally:
            self._busy.discard(agent)

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
