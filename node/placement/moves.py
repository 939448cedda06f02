"""Planned moves and drains of the agents this node runs.

A planned move (`move`) drains the agent, appends `journal.handoff` (disowning the journal),
waits for its publish ack and releases the lease; the target then finds itself home. A drain
(`node drain`, SIGTERM) hands each agent to a live member of its set that is ready to host it
(targets.py: one ready on the version it runs first, then the set's order decides, never a
member's claim of free slots), one after another within a deadline, and gives up the lease of
the ones no member takes. The node that handed an agent over never takes it back by itself
unless the target took it and then lapsed, or never took it for HANDOFF_RETURN_TTLS lease TTLs
(takeover.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from node.ops.polling import DeadlineExceeded, until
from node.placement.hosting import MOVE_ACK_SECS, Hosting, Link
from node.placement.leases import LeaseError
from node.placement.standby import prepared_key
from node.placement.targets import ready_targets, refusal_of_target
from node.web.http import Problem
from projections import catalogue as c

CHANGE_POLL_SECS = 0.05  # how often a drain looks whether a change in progress ended
DRAIN_SECS = 20.0  # a drain (`node drain`, SIGTERM) hands agents over within this long
MIN_DRAIN_SECS, MAX_DRAIN_SECS = 0.1, 300.0  # what `POST /node/drain?within_s=` may ask


class Moves(Hosting):
    # ------------------------------------------------------------------ drain
    async def drain(self, within: float = DRAIN_SECS) -> list[dict[str, Any]]:
        """Hand each placed agent this node runs to a live member of its set that is ready to
        host it (the first in its set's order after this node, targets.py), one after another
        within `within` seconds; one that no member can take, or left when the time is up,
        has its lease given up, so that a takeover follows at once rather than a TTL later.
        From then on this node takes no placed agent (until it restarts); its advert says so
        at once, so no move or drain elsewhere picks it meanwhile. What happened to each agent."""
        self.draining = True
        await self._advertise_now()
        deadline = time.monotonic() + within
        outcomes: list[dict[str, Any]] = []
        for agent in sorted(self.running):
            outcome: dict[str, Any] = {"agent": agent, "to": None, "epoch": None}
            await self._change_ended(agent, deadline)
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

    async def _change_ended(self, agent: str, deadline: float) -> None:
        """A change of the agent in progress here (an upgrade swapping its instance) ends
        before the agent is handed over, within the drain's time: else the handoff stopped
        the instance the upgrade was starting ("did not stop; replacing it anyway") and the
        upgrade's next write met a journal fenced by the handoff. An upgrade still waiting
        for a standby gives up at once when the node drains (PlacementManager's
        prepare_standby), so this wait is the swap's and its first run's, seconds."""
        with contextlib.suppress(DeadlineExceeded):
            await until(
                lambda: agent not in self.deployments.rollouts.changes,
                max(0.0, deadline - time.monotonic()),
                f"the change of {agent} in progress",
                CHANGE_POLL_SECS,
            )

    async def _drain_target(self, agent: str) -> str | None:
        placed, link = self.placements.get(agent), self.link
        if placed is None or link is None:
            return None
        others = [n for n in placed.placement if n != self.ctx.name]
        try:
            live = await link.adverts.live(others)
        except Exception:  # no adverts known: its lease is given up instead
            return None
        current = prepared_key(agent, placed.definition)
        ready = ready_targets(agent, placed.placement, self.ctx.name, live, current)
        return ready[0] if ready else None

    async def _advertise_now(self) -> None:
        """Put this node's advert now (a drain began: it hosts nothing more), not at the
        next interval; a put that fails is the next interval's to make."""
        link = self.link
        if link is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1.0):
                    await link.adverts.put()

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
        refused = refusal_of_target(agent, to, adverts.get(to))
        if refused is not None:
            raise Problem(409, refused)
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
