"""The spec's Sync area: push and pull envelopes, and the convergence report."""

from __future__ import annotations

from typing import Annotated

import msgspec
from aiohttp import web

from eventstore.envelope import Envelope
from eventstore.keys import verify_key_from_multibase
from eventstore.store import EventStore
from node.config.model import AGENT_NAME_RE, Config, ConfigError
from node.context import CONTEXT, context_of
from node.sync.convergence import Convergence, convergence_report
from node.sync.rules.outcome import Rejection
from node.sync.service import SYNC, SyncService
from node.sync.wire import PushedEnvelope, parse_push
from node.web.auth import IDENTITY
from node.web.body import read_body
from node.web.http import (
    SINCE,
    Problem,
    int_query,
    json_response,
    limit_param,
    limit_query,
    page_bytes,
    required_query,
)
from node.web.routes import Doc, Query, add_route
from projections.journals import Journals
from projections.keys import KEY_JOURNAL_PREFIX

SYNC_SCOPES = ("read", "sync")
AGENT_QUERY = Query("agent", str, "journal (agent) name", required=True)


class EnvelopeRead(msgspec.Struct):
    seq: int
    agent: str
    payload_hash: Annotated[str, msgspec.Meta(pattern="^sha256:[0-9a-f]{64}$")]
    timestamp: str
    signature: Annotated[str, msgspec.Meta(pattern="^ed25519:")]


class EnvelopePage(msgspec.Struct):
    envelopes: list[EnvelopeRead]


class PushedPage(msgspec.Struct):
    envelopes: list[PushedEnvelope]


class Push(msgspec.Struct):
    peer_id: str
    envelopes: list[PushedEnvelope]


class PushResult(msgspec.Struct):
    accepted: int
    rejected: int
    heads: dict[str, int]
    rejections: list[Rejection]


def _service(request: web.Request) -> SyncService:
    return request.app[SYNC]


def _journal_query(request: web.Request) -> str:
    agent = required_query(request, "agent")
    if agent.startswith("$"):
        raise Problem(400, f"{agent[:80]!r} is a node-level journal; those are not replicated")
    # an agent's journal, or `@<node>`: a node's key journal (projections/keys.py)
    if not AGENT_NAME_RE.fullmatch(agent.removeprefix(KEY_JOURNAL_PREFIX)):
        raise Problem(400, f"query parameter `agent` is not a journal name: {agent[:80]!r}")
    return agent


async def post_envelopes(request: web.Request) -> web.Response:
    push = parse_push(await read_body(request))
    identity = request.get(IDENTITY)
    if identity is None or push.peer_id != identity.name:
        caller = identity.name if identity else "?"
        raise Problem(403, f"peer_id {push.peer_id!r} does not match the caller's token {caller!r}")
    outcome = await _service(request).receiver.receive(push.peer_id, push.envelopes)
    return json_response(outcome.as_reply())


async def get_envelopes(request: web.Request) -> web.Response:
    agent = _journal_query(request)
    since = int_query(request, "since", 0)
    limit = limit_query(request, 100)
    ctx = context_of(request)
    envelopes = ctx.store.read_stream(agent, since, limit) if limit else []
    identity = request.get(IDENTITY)
    head = ctx.projections.get(Journals).head.get(agent)
    caller = identity.name if identity is not None else None
    # a peer's pull acks `since`, of a journal this node holds
    if caller is not None and head is not None and any(p.name == caller for p in ctx.config.peers):
        _service(request).acks.note(caller, {agent: min(since, head)})
    ctx.metrics.sync_envelopes.inc(len(envelopes))
    return json_response({"envelopes": [e.as_read() for e in envelopes]})


async def get_pushed_envelopes(request: web.Request) -> web.Response:
    """Any journal this node holds, its own or relayed, as pushed (with payloads): what a node
    repairing a gap imports, verified by the origin's key whoever serves it."""
    agent = _journal_query(request)
    since = int_query(request, "since", 0)
    limit = limit_query(request, 100)
    ctx = context_of(request)
    envelopes = _pushed_page(ctx.store, agent, since, limit, page_bytes(ctx))
    ctx.metrics.sync_envelopes.inc(len(envelopes))
    return json_response({"envelopes": [e.as_pushed() for e in envelopes]})


_PUSHED_CHUNK = 50
_PUSHED_OVERHEAD = 200  # the JSON around one payload: its seq, agent and signature


def _pushed_page(
    store: EventStore, agent: str, since: int, limit: int, max_bytes: int
) -> list[Envelope]:
    """Up to `limit` envelopes after `since`, read a chunk at a time, stopping once their
    payloads, base64'd, reach `max_bytes` (the client goes on from the last seq)."""
    page: list[Envelope] = []
    size = 0
    while len(page) < limit and size < max_bytes:
        chunk = store.read_stream(agent, since, min(_PUSHED_CHUNK, limit - len(page)))
        for envelope in chunk:
            page.append(envelope)
            size += len(envelope.payload) * 4 // 3 + _PUSHED_OVERHEAD
            if size >= max_bytes:
                break
        if len(chunk) < _PUSHED_CHUNK or not chunk:
            break
        since = chunk[-1].seq
    return page


async def get_convergence(request: web.Request) -> web.Response:
    agent = _journal_query(request)
    return json_response(convergence_report(context_of(request), agent))


def check_peer_keys(config: Config) -> None:
    """A configured key that is not an ed25519 multibase key stops the node at start-up."""
    for i, peer in enumerate(config.peers):
        if peer.public_key:
            try:
                verify_key_from_multibase(peer.public_key)
            except ValueError as exc:
                raise ConfigError(f"peers[{i}].public_key: {exc}") from None


def setup(app: web.Application) -> None:
    ctx = app[CONTEXT]
    check_peer_keys(ctx.config)
    service = app[SYNC] = SyncService(ctx)
    add_route(
        app,
        "POST",
        "/api/v1/sync/envelopes",
        post_envelopes,
        "sync",
        Doc(
            "Push envelopes from a peer",
            "sync",
            PushResult,
            errors=(400, 403, 413),
            body=Push,
        ),
    )
    add_route(
        app,
        "GET",
        "/api/v1/sync/envelopes",
        get_envelopes,
        SYNC_SCOPES,
        Doc(
            "Envelopes of one journal after a seq",
            "sync",
            EnvelopePage,
            errors=(400,),
            query=(AGENT_QUERY, SINCE, limit_param(100)),
        ),
    )
    add_route(
        app,
        "GET",
        "/api/v1/sync/envelopes/pushed",
        get_pushed_envelopes,
        "sync",
        Doc(
            "Envelopes of one journal after a seq, with their payloads (repair and relay)",
            "sync",
            PushedPage,
            errors=(400,),
            query=(AGENT_QUERY, SINCE, limit_param(100)),
        ),
    )
    add_route(
        app,
        "GET",
        "/api/v1/sync/convergence",
        get_convergence,
        SYNC_SCOPES,
        Doc(
            "Replication state of one journal",
            "sync",
            Convergence,
            errors=(400,),
            query=(AGENT_QUERY,),
        ),
    )
    app.cleanup_ctx.append(service.lifecycle)
