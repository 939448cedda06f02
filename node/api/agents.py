"""Agents as a live resource: GET the deployed agents, PUT (deploy or upgrade), stop, start,
rollback and DELETE one (node/services/deployments.py; docs/api.md, docs/operations.md)."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

import msgspec
from aiohttp import web

from node.config.model import AGENT_NAME
from node.context import context_of
from node.placement.key import PLACEMENT
from node.placement.moves import DRAIN_SECS, MAX_DRAIN_SECS, MIN_DRAIN_SECS
from node.runtime.agents import AGENTS
from node.services.agentpatch import AgentPatch, patched
from node.services.definitions import DeployRequest, RollbackRequest
from node.services.deployments import DEPLOYMENTS, DeploymentService
from node.services.mergepatch import MERGE_PATCH
from node.services.rollouts import ChangeView, RolloutView
from node.web.auth import IDENTITY
from node.web.body import json_body, read_body
from node.web.boundedjson import loads_as
from node.web.http import Problem, json_response
from node.web.pages import CURSOR, PAGED, page_response
from node.web.routes import Doc, Query, add_route
from projections import catalogue as c
from projections.deployments import (
    DeployedAgent,
    DeployedAgents,
    Deployment,
    HistoryEntry,
    component_version,
)
from projections.placements import Placed, Placements

BASE = "/api/v1/agents"
# `replica`: a placed agent another node runs now (this node holds a copy of its journal)
Status = Literal["running", "idle", "stopped", "error", "unknown", "replica"]


class DeploymentView(msgspec.Struct, kw_only=True):
    revision: int
    component: str
    version: str | None
    sha256: str
    deployed_at: str
    operator: str | None


class AgentView(msgspec.Struct, kw_only=True):
    """One deployed agent: what runs (revision, component, version, permissions), where it was
    declared (`config`: runtime.toml, `api`: deployed through this API), whether it is
    stopped, what a rollback returns to, and its deployment history (oldest first)."""

    name: str
    source: c.DeploymentSource
    status: Status  # what the runtime reports now
    stopped: bool  # stopped by an operator (tasks stay queued)
    last_error: str | None
    current: DeploymentView
    definition: c.AgentDefinition
    previous: list[DeploymentView]  # newest last: a rollback returns to the last one
    history: list[HistoryEntry]
    # without a live instance: what it does and why (as GET /api/v1/status says)
    phase: str | None = None
    reason: str | None = None
    change: ChangeView | None = None  # a lifecycle change in progress: its step
    rollout: RolloutView | None = None  # the latest upgrade's or rollback's probation
    placement: PlacementView | None = None  # a placed agent: where it runs, its moves


class LeaseView(msgspec.Struct, kw_only=True):
    holder: str
    expires_in: float | None  # seconds, as this node's renewals keep it


class HomeLeaseView(msgspec.Struct, kw_only=True):
    expires_in: float  # about, by the bucket's stamp of its last renewal
    revision: int


class PlacementView(msgspec.Struct, kw_only=True):
    """Where a placed agent runs (docs/mesh.md, "What an operator sees and does"): the node
    writing its journal now, in which epoch, the lease this node holds for it (None: not this
    node), the home's lease as the mesh has it (None: gone) and whether the home is `suspect`
    (its lease gone or about to lapse), the nodes that may host it and those of them ready to
    take it now (`candidates`: a move's targets), who stopped it (None: running), the revision
    its journal names, its moves and its deployments across homes (oldest first, the last
    20 of each)."""

    home: str | None
    epoch: int
    lease: LeaseView | None
    home_lease: HomeLeaseView | None = None
    suspect: bool = False
    candidates: list[str] = []
    placement: list[str]
    stopped_by: str | None = None
    revision: int = 0
    moves: list[dict[str, Any]]
    history: list[dict[str, Any]] = []


class MoveRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    to: Annotated[str, msgspec.Meta(pattern=AGENT_NAME)]


class MoveView(msgspec.Struct, kw_only=True):
    """A planned move: the handoff this node signed, and how long draining took."""

    agent: str
    to: str
    epoch: int
    handoff_seq: int
    drained_in_s: float


class DrainedAgent(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One placed agent a drain handed over (`moved`: to `to`, at `epoch`) or let go
    (`released`: its lease given up for another node of its set to take, `why` if one was
    tried and failed)."""

    agent: str
    done: Literal["moved", "released"]
    to: str | None = None
    epoch: int | None = None
    why: str | None = None


class Drained(msgspec.Struct, kw_only=True):
    agents: list[DrainedAgent]


class StandbyView(msgspec.Struct, kw_only=True):
    """After a deploy or upgrade of a placed agent: the other nodes of its set (`of`) and
    those of them ready to take it over on what it runs now (`ready`)."""

    ready: list[str]
    of: list[str]


class AgentChange(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What a lifecycle call did (`message`) and the agent afterwards (None once removed);
    after a placed agent's deploy or upgrade, its `standby`."""

    message: str
    agent: AgentView | None
    standby: StandbyView | None = None


def _deployment(d: Deployment) -> DeploymentView:
    return DeploymentView(
        revision=d.revision,
        component=d.definition.component,
        version=d.version,
        sha256=d.definition.sha256,
        deployed_at=d.deployed_at,
        operator=d.operator,
    )


async def placement_view(request: web.Request, name: str) -> PlacementView | None:
    manager = request.app.get(PLACEMENT)
    placed = await manager.view(name) if manager is not None else None
    return msgspec.convert(placed, PlacementView) if placed is not None else None


async def view(request: web.Request, deployed: DeployedAgent) -> AgentView:
    status: Status = "unknown"
    last_error = phase = reason = None
    agents = request.app[AGENTS]
    if agents.running and deployed.name in agents.runtime.workers:
        now = agents.runtime.worker(deployed.name).status()
        status, last_error, phase, reason = now.status, now.last_error, now.phase, now.reason
    rollouts = request.app[DEPLOYMENTS].rollouts
    change, rollout = rollouts.changes.get(deployed.name), rollouts.latest.get(deployed.name)
    return AgentView(
        name=deployed.name,
        source=deployed.source,
        status=status,
        stopped=deployed.suspended,
        last_error=last_error,
        current=_deployment(deployed.current),
        definition=deployed.current.definition,
        previous=[_deployment(d) for d in deployed.previous],
        history=list(deployed.history),
        phase=phase,
        reason=reason,
        change=change.view() if change is not None else None,
        rollout=rollout.view() if rollout is not None else None,
        placement=await placement_view(request, deployed.name),
    )


async def replica_view(request: web.Request, placed: Placed) -> AgentView:
    """A placed agent another node runs, not deployed here: what its journal says (the
    revision and who deployed it, from its latest `agent.placed`)."""
    definition = placed.definition
    latest = placed.history[-1] if placed.history else None
    return AgentView(
        name=placed.agent,
        source="api",
        status="replica",
        stopped=placed.stopped,
        last_error=None,
        current=DeploymentView(
            revision=placed.revision,  # its home's, as its journal names it
            component=definition.component,
            version=component_version(definition.component),
            sha256=definition.sha256,
            deployed_at=latest.at if latest is not None else "",
            operator=latest.operator if latest is not None else None,
        ),
        definition=definition,
        previous=[],
        history=[],
        placement=await placement_view(request, placed.agent),
    )


def _service(request: web.Request) -> DeploymentService:
    return request.app[DEPLOYMENTS]


def _name(request: web.Request) -> str:
    return request.match_info["name"]


def _operator(request: web.Request) -> str:
    return request[IDENTITY].name


async def _answer(request: web.Request, message: str, status: int = 200) -> web.Response:
    deployed = context_of(request).projections.get(DeployedAgents).get(_name(request))
    agent = await view(request, deployed) if deployed is not None else None
    found = _service(request).standbys.pop(_name(request), None)
    standby = StandbyView(ready=list(found.ready), of=list(found.of)) if found else None
    return json_response(AgentChange(message=message, agent=agent, standby=standby), status)


def _wait_standby(request: web.Request) -> bool:
    """`?wait_standby=false`: a placed agent's deploy or upgrade does not wait for another
    node of its set to be ready (node/placement/standby.py)."""
    raw = request.query.get("wait_standby", "true")
    if raw not in ("true", "false"):
        raise Problem(400, f"wait_standby must be true or false, got {raw[:40]!r}")
    return raw == "true"


async def _shown(request: web.Request, deployed: DeployedAgent) -> AgentView:
    """A deployed agent; one that moved to another node reads as a replica here, with what
    its journal says."""
    if deployed.name in _service(request).elsewhere:
        placed = context_of(request).projections.get(Placements).get(deployed.name)
        if placed is not None:
            return await replica_view(request, placed)
    return await view(request, deployed)


async def list_agents(request: web.Request) -> web.Response:
    ctx = context_of(request)
    model = ctx.projections.get(DeployedAgents)
    shown = [await _shown(request, d) for d in model.list()]
    replicas = [
        await replica_view(request, p)
        for p in ctx.projections.get(Placements).placed_on(ctx.name)
        if model.get(p.agent) is None
    ]
    return page_response(request, sorted(shown + replicas, key=lambda a: a.name))


async def get_agent(request: web.Request) -> web.Response:
    ctx = context_of(request)
    deployed = ctx.projections.get(DeployedAgents).get(_name(request))
    if deployed is None:
        placed = ctx.projections.get(Placements).get(_name(request))
        if placed is not None and ctx.name in placed.placement:
            return json_response(await replica_view(request, placed))
        raise _not_deployed(request)
    return json_response(await _shown(request, deployed))


def _not_deployed(request: web.Request) -> Problem:
    """404; while the agent's first deploy is under way, the problem says which step it is at
    (`change`, as a deployed agent's GET does), for a client waiting on the deploy."""
    name = _name(request)
    change = _service(request).rollouts.changes.get(name)
    if change is None:
        return Problem(404, f"no agent {name!r} is deployed on this node")
    shown = change.view()
    return Problem(
        404,
        f"no agent {name!r} is deployed on this node yet: its {shown.action} is waiting for "
        f"{shown.step}",
        change=msgspec.to_builtins(shown),
    )


async def move(request: web.Request) -> web.Response:
    """Hand the agent over to another node of its placement set (this node is its home)."""
    body = await json_body(request, MoveRequest)
    manager = request.app.get(PLACEMENT)
    if manager is None:
        raise Problem(409, 'moving an agent needs the NATS mesh ([mesh] transport = "nats")')
    name = _name(request)
    projections = context_of(request).projections
    if projections.get(Placements).get(name) is None and not projections.get(DeployedAgents).get(
        name
    ):
        raise Problem(404, f"no agent {name!r} is deployed on this node")
    moved = await manager.move(name, body.to)
    return json_response(msgspec.convert(moved, MoveView))


def _drain_within(raw: str | None) -> float:
    if raw is None:
        return DRAIN_SECS
    try:
        within = float(raw)
    except ValueError:
        within = math.nan
    if not MIN_DRAIN_SECS <= within <= MAX_DRAIN_SECS:  # NaN too
        raise Problem(
            400,
            f"within_s must be a number of seconds from {MIN_DRAIN_SECS} to {MAX_DRAIN_SECS}, "
            f"got {raw[:40]!r}",
        )
    return within


async def drain(request: web.Request) -> web.Response:
    """Hand every placed agent this node runs to another node of its set; take none again.
    `?within_s=` bounds how long (DRAIN_SECS unless given): what is not handed over by then
    has its lease given up."""
    manager = request.app.get(PLACEMENT)
    if manager is None:
        raise Problem(409, 'draining needs the NATS mesh ([mesh] transport = "nats")')
    drained = await manager.drain(_drain_within(request.query.get("within_s")))
    return json_response(msgspec.convert({"agents": drained}, Drained))


async def deploy(request: web.Request) -> web.Response:
    body = await json_body(request, DeployRequest)
    wait = _wait_standby(request)
    status, message = await _service(request).deploy(_name(request), body, _operator(request), wait)
    return await _answer(request, message, status)


async def patch(request: web.Request) -> web.Response:
    """A JSON merge patch (RFC 7396) of what runs: only the keys given change."""
    await json_body(request, AgentPatch)  # its shape, with a message naming a bad key
    changes = loads_as(await read_body(request), dict[str, Any])
    deployed = context_of(request).projections.get(DeployedAgents).get(_name(request))
    if deployed is None:
        raise Problem(404, f"no agent {_name(request)!r} is deployed on this node")
    body = patched(deployed.current.definition, changes)
    wait = _wait_standby(request)
    status, message = await _service(request).deploy(_name(request), body, _operator(request), wait)
    return await _answer(request, message, status)


async def stop(request: web.Request) -> web.Response:
    return await _answer(
        request, await _service(request).suspend(_name(request), _operator(request))
    )


async def start(request: web.Request) -> web.Response:
    return await _answer(
        request, await _service(request).resume(_name(request), _operator(request))
    )


async def hand_owner(request: web.Request) -> web.Response:
    """Hand the agent's ownership to another node of its set (this node is owner and home)."""
    body = await json_body(request, MoveRequest)
    handed = await _service(request).hand_owner(_name(request), body.to, _operator(request))
    return await _answer(request, handed)


async def rollback(request: web.Request) -> web.Response:
    reason = ""
    if request.can_read_body:
        reason = (await json_body(request, RollbackRequest)).reason
    service = _service(request)
    return await _answer(
        request, await service.rollback(_name(request), reason, _operator(request))
    )


async def remove(request: web.Request) -> web.Response:
    return await _answer(
        request, await _service(request).remove(_name(request), _operator(request))
    )


def setup(app: web.Application) -> None:
    read = ("Deployed agents: version, source, status, history", "agents")
    paged = Doc(*read, list[AgentView], errors=(400,), query=(CURSOR,), description=PAGED)
    add_route(app, "GET", BASE, list_agents, "read", paged)
    add_route(app, "GET", BASE + "/{name}", get_agent, "read", Doc(*read, AgentView, errors=(404,)))
    add_route(
        app,
        "PUT",
        BASE + "/{name}",
        deploy,
        "admin",
        Doc(
            "Deploy an agent from the registry, or upgrade a deployed one",
            "agents",
            AgentChange,
            body=DeployRequest,
            errors=(404, 409, 422, 503),
            extra={201: {"application/json": AgentChange}},
            description=(
                "The body is the whole definition: a key left out takes its default (not the "
                "value the agent had), as with the `[[agents]]` entry of runtime.toml. To change "
                "some keys and keep the rest, PATCH. "
                "201 when the agent is new, 200 for an upgrade (or no change). `component` is "
                "`registry:ID@VERSION`: publish an uploaded component to the registry first. "
                "An upgrade keeps the agent's journal, state and grants; the old instance "
                "finishes its run in progress first. A new version that does not load or "
                "whose first tick fails is rolled back by the node: 422 saying why. 409 for an "
                "agent declared in runtime.toml."
            ),
        ),
    )
    add_route(
        app,
        "PATCH",
        BASE + "/{name}",
        patch,
        "admin",
        Doc(
            "Upgrade a deployed agent, changing only the keys given (JSON merge patch)",
            "agents",
            AgentChange,
            body_content={MERGE_PATCH: AgentPatch, "application/json": AgentPatch},
            errors=(404, 409, 422, 503),
            description=(
                "A JSON merge patch (RFC 7396) of the agent's current definition, in PUT's "
                "keys: a key given replaces its value, an object (`capabilities`, `approval`) "
                "merges key by key, `null` removes a key so that its default applies, a list "
                "(`grant_domains`, `allow_hosts`, `placement`) is replaced whole; `placement` "
                "absent or null keeps the agent's set. The result is deployed as a PUT of it "
                "would be: 200 with the new revision (or no change), 422 when the new "
                "version fails its first tick (the node rolls back), 409 for an agent declared "
                "in runtime.toml, 404 for one not deployed."
            ),
        ),
    )
    for verb, handler, summary in (
        ("stop", stop, "Stop an agent: no ticks, tasks or calls; tasks stay queued"),
        ("start", start, "Start a stopped agent"),
        ("rollback", rollback, "Roll an agent back to its previous deployment"),
    ):
        add_route(
            app,
            "POST",
            f"{BASE}/{{name}}/{verb}",
            handler,
            "admin",
            Doc(summary, "agents", AgentChange, errors=(400, 404, 409, 503)),
        )
    add_route(
        app,
        "POST",
        BASE + "/{name}/owner",
        hand_owner,
        "admin",
        Doc(
            "Hand a placed agent's ownership to another node of its placement set",
            "agents",
            AgentChange,
            body=MoveRequest,
            errors=(400, 404, 409, 422, 503),
            description=(
                "Asked of the agent's owner while it is the home: appends `agent.owner_handed` "
                "naming the node, answered once the stream holds it. From then on only that "
                "node's changes of the agent's definition, placement, stop, start and removal "
                'are accepted anywhere (docs/mesh.md, "The owner decides, the home runs").'
            ),
        ),
    )
    add_route(
        app,
        "POST",
        BASE + "/{name}/move",
        move,
        "admin",
        Doc(
            "Move a placed agent to another node of its placement set (planned move)",
            "agents",
            MoveView,
            body=MoveRequest,
            errors=(400, 404, 409, 422, 503),
            description=(
                "Asked of the agent's home: it drains the agent (its run in progress ends), "
                "appends `journal.handoff` naming the target, waits for the stream to hold it "
                "and releases the lease; the target then takes the lease, starts the agent and "
                "appends `agent.moved_in`. 422 when the target is not in the placement set or "
                "lacks the agent's grant domains, 409 when this node is not the home or the "
                "target has no fresh advert, 503 when the stream did not acknowledge the "
                'handoff. See docs/mesh.md, "Placement and failover".'
            ),
        ),
    )
    add_route(
        app,
        "POST",
        "/api/v1/node/drain",
        drain,
        "admin",
        Doc(
            "Hand every placed agent this node runs to another node of its set (drain)",
            "agents",
            Drained,
            errors=(400, 409),
            query=(
                Query(
                    "within_s",
                    msgspec.json.schema(float)
                    | {"minimum": MIN_DRAIN_SECS, "maximum": MAX_DRAIN_SECS},
                    f"hand over within this many seconds (default {DRAIN_SECS:.0f})",
                ),
            ),
            description=(
                "Each placed agent this node homes is moved (a planned move) to a live node of "
                "its placement set that is ready to host it, the one with the most free slots; "
                "one that no node can take, or left when the time is up (a handoff cut short "
                "included: its agent is stopped here), has its lease given up so that "
                "a node of its set takes it over at once. From then on the node takes no placed "
                "agent until it restarts. A SIGTERM drains the same way before the node stops. "
                'See docs/mesh.md, "Draining a node".'
            ),
        ),
    )
    add_route(
        app,
        "DELETE",
        BASE + "/{name}",
        remove,
        "admin",
        Doc(
            "Remove an agent deployed through the API (its journal is kept)",
            "agents",
            AgentChange,
            errors=(404, 409, 503),
        ),
    )
