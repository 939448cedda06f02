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

The jobs are modules of their own: this one supervises (the loop over every placed agent on
each NATS connection, and the deployments' hooks); becoming home and taking over are
takeover.py's, planned moves and drains moves.py's, and what they share (consent, running and
stopping an agent here) hosting.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from eventstore.writer import Fenced
from node.context import NodeContext
from node.placement.adverts import Advert, served_domains
from node.placement.buckets import BucketError
from node.placement.components import ComponentError, ComponentRefused
from node.placement.hosting import MOVE_ACK_SECS, SHARE_CHECK_SECS, Link
from node.placement.leases import RENEW_SHARE, LeaseError
from node.placement.moves import Moves
from node.placement.prepare import wanted_components
from node.placement.standby import Standby, prepared_key, wait_for_standby
from node.placement.takeover import Takeovers
from node.services.approvals import ApprovalGate
from node.services.deployments import DeploymentService
from node.services.registry import RegistryService
from node.web.http import Problem
from projections import catalogue as c
from projections.deployments import DeployedAgents
from projections.placements import Placed

QUIET_ATTACH_TRIES = 2  # timed-out attaches in a row logged at INFO before a WARNING
MAX_ATTACH_PAUSE_SECS = 30.0


def attach_backoff(failures: int, check_secs: float) -> float:
    """The pause after `failures` failed attaches in a row: 1 s, 2 s, 4 s ... up to 30 s
    (never less than a placement turn)."""
    return max(check_secs, min(MAX_ATTACH_PAUSE_SECS, 2.0 ** (failures - 1)))


if TYPE_CHECKING:  # nats-py is an optional extra: imported where the NATS mesh runs
    from nats.js import JetStreamContext

    from node.sync.service import SyncService

log = logging.getLogger("agent-node.placement")

LinkOpener = Callable[["PlacementManager", "JetStreamContext", Any], Awaitable[Link]]


class PlacementManager(Takeovers, Moves):
    """Supervision: follow the node's NATS connection and look at every placed agent on it
    (the jobs it hands each agent to are Takeovers' and Moves', over Hosting's books)."""

    def __init__(
        self,
        ctx: NodeContext,
        deployments: DeploymentService,
        approvals: ApprovalGate,
        registry: RegistryService,
        sync: SyncService,
    ) -> None:
        super().__init__(ctx, deployments, approvals, registry, sync)
        deployments.placement = self
        sync.receiver.on_moved = self.journal_moved

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

    async def prepare_standby(
        self,
        name: str,
        definition: c.AgentDefinition,
        wait: bool,
        progress: Callable[[Standby], None],
    ) -> Standby:
        """Before an upgrade switches to `definition`: journal `agent.preparing` (the set's
        other nodes fetch and compile it), then, if `wait`, wait up to `[mesh]
        standby_wait_secs` until one of them advertises it ready (standby.py)."""
        await self.ctx.store.append(name, *c.event_of(c.AgentPreparing(definition=definition)))
        key = prepared_key(name, definition)
        found = await self._standby(
            name,
            lambda advert: key in advert.prepared,
            lambda advert: key in advert.preparing,
            wait,
            progress,
        )
        if self._stopping():  # the agent is handed over on the version it runs, not this one
            raise Problem(
                503,
                f"the upgrade of {name!r} was not made: this node began shutting down or "
                "draining while it waited for a standby, and hands the agent over on the "
                "version it runs; upgrade it again once it is back on its owner",
            )
        return found

    def _stopping(self) -> bool:
        """A SIGTERM (the node shuts down: its drain hands the agents over once the requests
        in progress end) or a drain: a wait for a standby ends at once."""
        return self.draining or self.ctx.shutting_down

    async def standby(self, name: str, wait: bool, progress: Callable[[Standby], None]) -> Standby:
        """After a first deploy: the set's other nodes ready to take `name` over (its advert
        lists it), waited for as `prepare_standby` waits."""
        return await self._standby(
            name,
            lambda advert: name in advert.hosts,
            lambda advert: name in advert.preparing,
            wait,
            progress,
        )

    async def _standby(
        self,
        name: str,
        is_ready: Callable[[Advert], bool],
        is_pending: Callable[[Advert], bool],
        wait: bool,
        progress: Callable[[Standby], None],
    ) -> Standby:
        placed, link = self.placements.get(name), self.link
        others = [n for n in placed.placement if n != self.ctx.name] if placed else []
        if not others or link is None:
            return Standby((), tuple(others))
        mesh = self.ctx.config.mesh
        within = mesh.standby_wait_secs if wait else 0.0
        grace = mesh.advert_interval_secs * 2 + 1.0  # the set's adverts catch up meanwhile
        return await wait_for_standby(
            link.adverts.live,
            others,
            is_ready,
            is_pending,
            within,
            grace,
            progress,
            self._stopping,
        )

    async def claim(self, name: str) -> None:
        """The lease of a new placed agent deployed here: at its journal's epoch, 0 for a new
        journal. An agent removed and deployed again keeps its journal, and its epoch: a
        lease at 0 under a journal at epoch 3 counted as none, and another node of the set
        took the agent over a second later (issue 52 item 6)."""
        self._linked()
        try:
            self.ctx.store.own(name)
            lease = await self.leases.acquire(name, self.journals.epoch_of(name))
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

    # ------------------------------------------------------------------ the loop
    _attach_failures = 0  # attaches failed in a row (the backoff's count)

    async def supervise(self, mesh: Any, open_link: LinkOpener) -> None:
        """Follow the node's NATS connection (node/sync/nats/mesh.py): a Link and the loop
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
        except Exception as exc:  # tried again, sooner first, then backing off
            self._attach_failures += 1
            pause = attach_backoff(self._attach_failures, self.check_secs)
            # a fresh cluster's first attach may time out while another node creates the
            # streams (RAFT on three servers): said quietly, the next try usually succeeds
            quiet = isinstance(exc, TimeoutError) and self._attach_failures <= QUIET_ATTACH_TRIES
            (log.info if quiet else log.warning)(
                "placement: attaching the buckets: %s: %s; trying again in %.1f s",
                type(exc).__name__,
                exc,
                pause,
            )
            await asyncio.sleep(pause)
            return
        self._attach_failures = 0
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
                self.prepare.forget(wanted_components(placed_here))
                for placed in placed_here:
                    if placed.agent not in self._busy:
                        await self._consider(link, placed)
                    _stop_if_cancelled()
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
            elif self._behind(placed):
                self.prepare.want(placed.definition)
                if self.prepare.ready(placed.definition) and agent not in self._busy:
                    self._busy.add(agent)  # until the switch ends (_resume_upgrade)
                    self._in_background(self._resume_upgrade(placed))
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
        if placed.previous is not None:
            self.prepare.want(placed.previous)  # what it stands by on until the new one is ready
        preparing = placed.preparing
        consent = self.consent(agent)
        if (
            preparing is not None
            and consent is not None
            and consent.refusal(preparing, served_domains(self.ctx.config)) is None
        ):
            self.prepare.want(preparing)  # an upgrade to come: a standby on it before it does
        runnable = self.runnable(placed)
        if runnable is None:
            return
        placed = runnable
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


def _stop_if_cancelled() -> None:
    """A cancellation the NATS client turned into its own error as it closed (seen: a
    ConnectionClosedError raised while handling the CancelledError) is caught as one agent's
    failure: the loop must still end, else it serves a closed connection for good and the
    connection's turn (`_follow`) waits for it forever."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
