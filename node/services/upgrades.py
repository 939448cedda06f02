"""Revisions of an API-deployed agent: deploy a new one, upgrade it (load check, drain, first
tick, probation) and roll it back, by an operator or by the node itself when the new revision
fails (journaled `agent.rolled_back`, automatic).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec

from eventstore.store import NewEvent
from node.config.model import AGENT_NAME, AGENT_NAME_RE, AgentConfig, agent_problems
from node.runtime.runtime import AgentRuntime
from node.services.definitions import (
    RESERVED_NAMES,
    DeployRequest,
    bounded,
    definition_of,
    placed_event,
    placement_set,
)
from node.services.deployment_base import DeploymentBase, standby_step
from node.services.journal import ensure_local
from node.services.registry import parse_reference
from node.services.rollouts import Change
from node.web.http import Problem, problem_list
from projections import catalogue as c
from projections.deployments import NODE_STREAM, DeployedAgent
from projections.placements import Placements
from projections.tasks import Tasks


class Upgrades(DeploymentBase):
    """Deploy, upgrade and roll back an API agent; a failed new revision is rolled back."""

    def _check_request(self, name: str, body: DeployRequest) -> tuple[AgentConfig, Path]:
        if not AGENT_NAME_RE.fullmatch(name):
            raise Problem(400, f"agent name {name[:80]!r} must match {AGENT_NAME}")
        if name in RESERVED_NAMES:
            raise Problem(400, f"{name!r} is reserved (GET /api/v1/agents/{name} is a stream)")
        taken = {self.ctx.name, *(p.name for p in self.ctx.config.peers)}
        if name in taken:
            raise Problem(409, f"{name!r} is the name of a node of this mesh, not an agent")
        raw = msgspec.to_builtins(body)
        raw["name"] = name
        raw["grants"] = {"domains": raw.pop("grant_domains")}
        raw["http"] = {"allow_hosts": raw.pop("allow_hosts")}
        raw["inference"] = {
            "models": raw.pop("inference_models"),
            "default": raw.pop("inference_default"),
        }
        raw.pop("placement")  # checked by placement_set: not an entry's key as given
        if raw["fuel_per_tick"] is None:
            del raw["fuel_per_tick"]
        try:
            agent = msgspec.convert(raw, AgentConfig)
        except msgspec.ValidationError as exc:
            raise Problem(400, f"invalid body: {str(exc).replace('`$.', '`')}") from None
        problems = [p.removeprefix("agent.") for p in agent_problems(agent, "agent")]
        if problems:
            raise Problem(400, problem_list(problems))
        try:
            parse_reference(agent.component)
        except ValueError as exc:
            raise Problem(
                400,
                f"{exc}; the API deploys from the registry: publish the component "
                "(POST /api/v1/registry/packages) and deploy registry:ID@VERSION",
            ) from None
        try:
            path = self.registry.resolve(agent.component)
        except LookupError as exc:
            raise Problem(404, str(exc)) from None
        return agent, path

    async def deploy(
        self, name: str, body: DeployRequest, operator: str, wait_standby: bool = True
    ) -> tuple[int, str]:
        """Deploy a new agent (201) or upgrade a deployed one (200); (status, message). A
        placed agent's deploy or upgrade waits for a standby unless not `wait_standby`
        (node/placement/standby.py); `standbys[name]` says what it found."""
        self.standbys.pop(name, None)
        async with self._lock:
            ensure_local(self.ctx, name)  # a replica names the home before anything else
            agent, path = self._check_request(name, body)
            runtime = self.runtime
            ensure_local(self.ctx, name)
            package = self.registry.projection.version(*parse_reference(agent.component))
            assert package is not None  # resolved above
            definition = bounded(definition_of(agent, package.checksum))
            deployed = self.projection.get(name)
            placement = placement_set(self.ctx, body.placement, name)
            if deployed is None:
                async with self._changing(name, "deploy", "the component's compile check"):
                    return 201, await self._deploy_new(
                        name, definition, path, operator, placement, wait_standby
                    )
            self._only_api(deployed, "change")
            self._here(name)
            if deployed.current.definition == definition:
                if await self._replaced(name, definition, placement, operator):
                    return 200, f"agent {name!r} may now run on {', '.join(placement)}"
                return (
                    200,
                    f"agent {name!r} already runs this deployment "
                    f"(revision {deployed.current.revision}); nothing changed",
                )
            async with self._changing(name, "upgrade", "the component's compile check") as change:
                return 200, await self._upgrade(
                    deployed, definition, path, operator, runtime, change, placement, wait_standby
                )

    async def _replaced(
        self, name: str, definition: c.AgentDefinition, placement: tuple[str, ...], operator: str
    ) -> bool:
        """Only the placement set changed: journal it; whether it did change."""
        event = placed_event(self.ctx, name, placement, definition, True, "placed", operator)
        if event is None:
            return False
        if len(placement) > 1 and self.placement is not None:
            path = self.registry.resolve(definition.component)
            await self.placement.share(name, definition, path)
        await self.ctx.store.append_many([event])
        return True

    async def _deploy_new(
        self,
        name: str,
        definition: c.AgentDefinition,
        path: Path,
        operator: str,
        placement: tuple[str, ...] = (),
        wait_standby: bool = True,
    ) -> str:
        why = await self._loads(path)
        if why is not None:
            raise Problem(422, f"agent {name!r} not deployed: {why}")
        deployed = NewEvent(
            NODE_STREAM,
            *c.event_of(
                c.AgentDeployed(
                    agent=name, revision=1, source="api", definition=definition, operator=operator
                )
            ),
        )
        placed = placed_event(self.ctx, name, placement, definition, False, "deployed", operator)
        if placed is not None:  # its lease first: a placed agent runs only while held
            if self.placement is None:
                raise Problem(503, "placement needs the NATS mesh, which is not running")
            others = ", ".join(n for n in placement if n != self.ctx.name)
            self.rollouts.step(name, f"the mesh to hold the component for {others}")
            await self.placement.share(name, definition, path)
            self.rollouts.step(name, "the agent's lease")
            await self.placement.claim(name)
        await self.ctx.store.append_many([deployed] + ([placed] if placed is not None else []))
        if placed is not None and self.placement is not None:
            self.placement.started_here(name)
        self._set_hosted()
        await self._follow_grants(name, "not asked for by revision 1")
        if self._tasks is not None:
            self._tasks.add_agent(name, self.ctx.projections.get(Tasks).deliverable(name))
        self.rollouts.step(name, "its first run")
        worker = await asyncio.to_thread(self.runtime.add, self._spec(name))
        why = await self._probation(worker.probation, definition)
        standby = ""
        if placed is not None and self.placement is not None:
            step = standby_step("component")
            found = await self.placement.standby(
                name, wait_standby, lambda s: self.rollouts.step(name, step(s))
            )
            self.standbys[name] = found
            standby = f"; {found.text()}" if found.text() else ""
        if why is not None:
            return f"deployed as revision 1, but its first run failed: {why}{standby}"
        return f"deployed as revision 1{standby}"

    async def _upgrade(
        self,
        deployed: DeployedAgent,
        definition: c.AgentDefinition,
        path: Path,
        operator: str,
        runtime: AgentRuntime,
        change: Change,
        placement: tuple[str, ...] = (),
        wait_standby: bool = True,
    ) -> str:
        name = deployed.name
        revision = self.ctx.projections.get(Placements).next_revision(name, deployed.last_revision)
        previous = deployed.current.revision
        upgraded = c.AgentUpgraded(
            agent=name, revision=revision, source="api", definition=definition, operator=operator
        )
        why = await self._loads(path)  # before the swap: the old instance runs on meanwhile
        if why is not None:  # journaled as tried and undone, in one write
            rolled_back = self._rolled_back(name, revision, previous, why)
            await self.ctx.store.append_many(
                [NewEvent(NODE_STREAM, *c.event_of(e)) for e in (upgraded, rolled_back)]
            )
            raise self._failed(name, revision, previous, why)
        standby = ""
        if len(placement) > 1 and self.placement is not None:  # the new bytes, where needed
            change.step = "the mesh to hold the new component"
            await self.placement.share(name, definition, path)
            # a node of the set ready on the new version before this one switches to it
            step = standby_step("new version")
            found = await self.placement.prepare_standby(
                name, definition, wait_standby, lambda s: setattr(change, "step", step(s))
            )
            self.standbys[name] = found
            standby = f"; {found.text()}" if found.text() else ""
        await self._append(upgraded)
        current = placement or self._current_placement(name)
        await self._placed(name, definition, current, "upgraded", operator)
        self._set_hosted()
        await self._follow_grants(name, f"not asked for by revision {revision}")
        reason = f"upgraded to revision {revision}"
        self._draining(change, name)
        worker = await asyncio.to_thread(
            runtime.replace, self._spec(name), reason, self.drain_secs, not deployed.suspended
        )
        change.worker, change.step = None, "the new instance's first good run"
        if deployed.suspended:
            return f"upgraded to revision {revision} (stopped: it runs once started){standby}"
        why = await self._probation(worker.probation, definition)
        if why is None:
            return f"upgraded to revision {revision}{standby}" + self._watch(name, revision, worker)
        await self._append(self._rolled_back(name, revision, previous, why))
        current = self._current_placement(name)
        await self._placed(name, deployed.current.definition, current, "rolled_back", None)
        self._set_hosted()
        await self._follow_grants(name, f"not asked for by revision {previous}")
        self._draining(change, name)
        await asyncio.to_thread(
            runtime.replace,
            self._spec(name),
            f"rolled back to revision {previous}",
            self.drain_secs,
            not deployed.suspended,
        )
        raise self._failed(name, revision, previous, why)

    @staticmethod
    def _rolled_back(name: str, revision: int, previous: int, why: str) -> c.AgentRolledBack:
        return c.AgentRolledBack(
            agent=name,
            from_revision=revision,
            to_revision=previous,
            reason=f"revision {revision} failed: {why}"[: c.MAX_TEXT],
            automatic=True,
        )

    @staticmethod
    def _failed(name: str, revision: int, previous: int, why: str) -> Problem:
        return Problem(
            422,
            f"upgrade of {name!r} to revision {revision} failed and was rolled back to "
            f"revision {previous}: {why}",
            rolled_back_to=previous,
        )

    async def rollback(self, name: str, reason: str, operator: str) -> str:
        async with self._lock:
            deployed = self._agent(name)
            self._only_api(deployed, "roll back")
            if not deployed.previous:
                raise Problem(409, f"agent {name!r} has no earlier deployment to roll back to")
            async with self._changing(name, "rollback", "journaling") as change:
                return await self._roll_back_to(deployed, reason, operator, change)

    async def _roll_back_to(
        self, deployed: DeployedAgent, reason: str, operator: str, change: Change
    ) -> str:
        name = deployed.name
        target = deployed.previous[-1]
        await self._append(
            c.AgentRolledBack(
                agent=name,
                from_revision=deployed.current.revision,
                to_revision=target.revision,
                reason=reason[: c.MAX_TEXT],
                operator=operator,
            )
        )
        current = self._current_placement(name)
        await self._placed(name, target.definition, current, "rolled_back", operator)
        self._set_hosted()
        await self._follow_grants(name, f"not asked for by revision {target.revision}")
        self._draining(change, name)
        worker = await asyncio.to_thread(
            self.runtime.replace,
            self._spec(name),
            f"rolled back to revision {target.revision}",
            self.drain_secs,
            not deployed.suspended,
        )
        done = f"rolled back to revision {target.revision}"
        if deployed.suspended:
            return done + " (stopped: it runs once started)"
        return done + self._watch(name, target.revision, worker)

    def _watch(self, name: str, revision: int, worker: Any) -> str:
        """Put the new instance on probation; the answer's words for it."""
        self.rollouts.watch(name, revision, worker, self._probation_failed)
        settings = self.rollouts.settings
        return (
            f"; on probation for {settings.probation_ticks} good run(s) or "
            f"{settings.probation_secs:g} s (more than {settings.probation_max_faults} fault(s) "
            "roll it back)"
        )

    async def _probation_failed(self, name: str, revision: int, why: str) -> int | None:
        """Roll `revision` back by itself, as its probation failed: the revision returned to,
        or None when there is none (or an operator's change came first)."""
        async with self._lock, self._changing(name, "automatic rollback", "journaling") as change:
            deployed = self.projection.get(name)
            if (
                deployed is None
                or deployed.current.revision != revision
                or not self.rollouts.rolling_back(name, revision)
                or not deployed.previous
            ):
                return None
            target = deployed.previous[-1].revision
            target_definition = deployed.previous[-1].definition
            await self._append(
                c.AgentRolledBack(
                    agent=name,
                    from_revision=revision,
                    to_revision=target,
                    reason=f"revision {revision} failed its probation: {why}"[: c.MAX_TEXT],
                    automatic=True,
                )
            )
            current = self._current_placement(name)
            await self._placed(name, target_definition, current, "rolled_back", None)
            self._set_hosted()
            await self._follow_grants(name, f"not asked for by revision {target}")
            self._draining(change, name)
            await asyncio.to_thread(
                self.runtime.replace,
                self._spec(name),
                f"rolled back to revision {target} (probation failed)",
                self.drain_secs,
                not deployed.suspended,
            )
            return target
