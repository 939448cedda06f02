"""/api/v1/mcp/{agent}: MCP's streamable HTTP transport for one agent's server.

Thin: the transport's own checks, then node/runtime/mcp.py answers. Before anything is
parsed, a present `Origin` must be the node's public URL's or one of `[mcp] allowed_origins`
(403 otherwise: the MCP transport spec's defense against DNS rebinding), and a present
`MCP-Protocol-Version` must be a version the node speaks (400 otherwise).

POST: a `tools/call` whose client accepts `text/event-stream` is answered as a stream: the
agent's log lines and progress while the tool runs, as MCP notifications, and the node's
requests to the client (an approval asked as an elicitation, node/protocols/mcp_elicit.py),
then the response; everything else is one JSON answer (202 without a body for a notification
or for the client's answer to one of the node's requests).

Sessions (node/protocols/mcp_sessions.py): `initialize` answers with an `Mcp-Session-Id`; a
request that sends one must send one this token opened for this agent (404 otherwise: the
client initializes again). GET with the session id is the session's server-to-client stream
(resource updates, resumable with `Last-Event-ID`), holding one of the token's SSE stream slots
(node/streams/slots.py); GET without one is 405, as before sessions. DELETE ends the session.
Requests without a session id stand alone, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from node.context import CONTEXT, context_of
from node.protocols.mcp_elicit import ApprovalAsker
from node.protocols.mcp_features import McpFeatures
from node.protocols.mcp_resources import JournalResources
from node.protocols.mcp_sessions import HEADER, McpSession, McpSessions, SessionLimitError
from node.runtime.agents import AGENTS
from node.runtime.mcp import KNOWN_PROTOCOLS, McpServer
from node.services.approvals import APPROVALS
from node.services.tasks import TASKS
from node.streams.bus import BUS
from node.streams.slots import STREAM_SLOTS
from node.streams.sse import ClientGone, SseOut, sse_content
from node.web import jsonrpc as rpc
from node.web.auth import IDENTITY, TOKEN_DIGEST, identity_of
from node.web.body import read_body
from node.web.boundedjson import loads
from node.web.http import Problem, json_response
from node.web.routes import Doc, add_route

PATH = "/api/v1/mcp/{agent}"
VERSION_HEADER = "MCP-Protocol-Version"
DEFAULT_PORTS = {"http": 80, "https": 443}
GONE_CHECK_SECS = 1.0  # how often an idle GET stream looks whether its client is still there
SESSIONS = web.AppKey("mcp_sessions", McpSessions)
FEATURES = web.AppKey("mcp_features", McpFeatures)


def setup(app: web.Application) -> None:
    ctx = app[CONTEXT]
    mcp_config = ctx.config.mcp
    app[SESSIONS] = McpSessions(
        mcp_config.sessions_per_token, mcp_config.sessions_max, mcp_config.session_idle_secs
    )
    app[FEATURES] = McpFeatures(
        JournalResources(ctx, app[TASKS]), lambda: app[AGENTS].runtime, app[BUS]
    )
    app.on_shutdown.append(lambda app: _end_sessions(app))
    add_route(
        app,
        "POST",
        PATH,
        mcp,
        "operate",
        Doc(
            "MCP JSON-RPC 2.0 endpoint of an agent",
            "agents",
            content={
                "application/json": rpc.RESPONSE_SCHEMA,
                **sse_content("a tools/call's notifications, then its JSON-RPC response"),
            },
            errors=(400, 403, 404, 503),
            body_content={"application/json": rpc.REQUEST_SCHEMA},
            extra={202: None},
            description="202 without a body for a notification. See docs/protocols/mcp.md.",
        ),
    )
    add_route(
        app,
        "GET",
        PATH,
        mcp_get,
        "operate",
        Doc(
            "The MCP session's server-to-client stream",
            "agents",
            content=sse_content("the session's notifications (resource updates)"),
            errors=(400, 403, 404, 405, 429),
            description="Needs the `Mcp-Session-Id` that initialize answered with (405 "
            "without one); resumes after `Last-Event-ID`; a new stream of the session ends "
            "the one before. See docs/protocols/mcp.md.",
        ),
    )
    add_route(
        app,
        "DELETE",
        PATH,
        mcp_delete,
        "operate",
        Doc(
            "End an MCP session",
            "agents",
            errors=(400, 403, 404),
            extra={204: None},
            description="204; 404 for a session this token does not hold.",
        ),
    )


def origin_of(url: str) -> str | None:
    """`scheme://host:port` in lower case with the port always written; None if not a URL."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port or DEFAULT_PORTS.get(parts.scheme.lower())
    except ValueError:
        return None
    if parts.scheme.lower() not in DEFAULT_PORTS or not parts.hostname or port is None:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme.lower()}://{host.lower()}:{port}"


def check_transport(request: web.Request) -> None:
    config = context_of(request).config
    origin = request.headers.get("Origin")
    if origin is not None:
        allowed = {origin_of(config.public_url)} | {
            origin_of(o) for o in config.mcp.allowed_origins
        }
        if origin_of(origin) not in allowed - {None}:
            raise Problem(
                403,
                f"Origin {origin[:200]!r} may not call this MCP server: it is neither this "
                "node's public URL nor in [mcp] allowed_origins",
            )
    version = request.headers.get(VERSION_HEADER)
    if version is not None and version.strip() not in KNOWN_PROTOCOLS:
        raise Problem(
            400,
            f"{VERSION_HEADER} {version[:40]!r} is not a version this node speaks "
            f"({', '.join(KNOWN_PROTOCOLS)})",
        )


def _mcp_agent(request: web.Request) -> str:
    name = request.match_info["agent"]
    agent = context_of(request).config.agent(name)
    if agent is None or not agent.mcp:
        raise Problem(404, f"no MCP server for agent {name!r}")
    check_transport(request)
    return name


async def _end_sessions(app: web.Application) -> None:
    app[SESSIONS].close()


def _server(request: web.Request) -> McpServer:
    server = request.app[AGENTS].mcp
    if "resources/read" not in server.methods:  # the runtime makes it at start: add ours once
        request.app[FEATURES].register(server)
    return server


def _session(request: web.Request, agent: str) -> McpSession | None:
    """The session the request names (None: it names none); 404 for one this token does not
    hold for this agent (unknown, ended, or another token's)."""
    session_id = request.headers.get(HEADER)
    if session_id is None:
        return None
    session = request.app[SESSIONS].get(session_id, request.get(TOKEN_DIGEST, b""), agent)
    if session is None:
        raise Problem(
            404, f"no MCP session {session_id[:64]!r} of this token: initialize a new one"
        )
    return session


def _client_answer(body: bytes) -> dict[str, Any] | None:
    """The client's JSON-RPC response to one of the node's requests, if `body` is one."""
    if b'"method"' in body:
        return None
    with contextlib.suppress(ValueError):
        message = loads(body)
        if (
            isinstance(message, dict)
            and "id" in message
            and ("result" in message or "error" in message)
        ):
            return message
    return None


async def mcp(request: web.Request) -> web.StreamResponse:
    agent = _mcp_agent(request)
    server = _server(request)
    session = _session(request, agent)
    body = await read_body(request)
    answer = _client_answer(body)
    if answer is not None:
        if session is not None:
            session.answered(answer)
        return web.Response(status=202)
    call = rpc.parse(body, notifications=True)
    if isinstance(call, dict):
        return json_response(call)
    if call.notification:
        return web.Response(status=202)
    identity = identity_of(request)
    caller = identity.name if identity is not None else ""
    headers: dict[str, str] = {}
    if call.method == "initialize":
        opened = _open_session(request, agent, call)
        if isinstance(opened, str):
            refused = rpc.RpcError(rpc.INTERNAL_ERROR, opened)
            return json_response(rpc.error_response(call.id, refused))
        session = opened
        headers[HEADER] = session.id
    if session is not None:
        session.in_flight += 1
    try:
        if call.method == "tools/call" and "text/event-stream" in request.headers.get("Accept", ""):
            return await _streamed(request, server, agent, call, caller, session)
        response = json_response(await server.answer(agent, call, caller, session=session))
    finally:
        if session is not None:
            session.in_flight -= 1
    response.headers.update(headers)
    return response


def _open_session(request: web.Request, agent: str, call: rpc.Call) -> McpSession | str:
    """A new session for the caller, or why none can be made now."""
    identity = request.get(IDENTITY)
    capabilities = call.params.get("capabilities")
    try:
        return request.app[SESSIONS].create(
            request.get(TOKEN_DIGEST, b""),
            identity.name if identity is not None else "",
            agent,
            identity.groups if identity is not None else frozenset(),
            capabilities if isinstance(capabilities, dict) else {},
        )
    except SessionLimitError as e:
        return str(e)


async def _streamed(
    request: web.Request,
    server: McpServer,
    agent: str,
    call: rpc.Call,
    caller: str,
    session: McpSession | None,
) -> web.StreamResponse:
    """The call's notifications and the node's requests to the client as they come, then its
    response, on one SSE stream. A client that leaves does not end the call (a tool cannot be
    stopped inside wasm): its answer is awaited and dropped."""
    notices = server.notices(agent, call, caller)
    asker = (
        ApprovalAsker(
            request.app, request.app[APPROVALS], request.app[BUS], agent, session, notices
        )
        if session is not None and session.can_elicit()
        else None
    )
    if asker is not None:
        asker.start()
    answering = asyncio.ensure_future(server.answer(agent, call, caller, notices, session))
    keepalive = context_of(request).config.node.sse_keepalive_secs
    out = SseOut(request)
    if session is not None:
        out.response.headers[HEADER] = session.id
    try:
        await out.open()
        while not answering.done():
            waiting = asyncio.ensure_future(notices.wait(keepalive))
            await asyncio.wait({answering, waiting}, return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
            taken = notices.take()
            for notice in taken:
                await out.send(notice)
            if not taken and not answering.done():
                await out.ping()
        for notice in notices.take():
            await out.send(notice)
        dropped = notices.dropped_notice()
        if dropped is not None:
            await out.send(dropped)
        await out.send(answering.result())
    except ClientGone:
        await asyncio.shield(answering)
    finally:
        if asker is not None:
            asker.stop()
    return out.response


async def mcp_get(request: web.Request) -> web.StreamResponse:
    agent = _mcp_agent(request)
    session = _session(request, agent)
    if session is None:
        raise web.HTTPMethodNotAllowed("GET", ["POST"])
    last = request.headers.get("Last-Event-ID", "")
    slots = request.app[STREAM_SLOTS]
    slot = slots.open(request)
    session.streams += 1
    session.generation += 1  # a new stream of the session ends the one before (a reconnect)
    generation = session.generation
    session.wake.set()
    out = SseOut(request)
    out.response.headers[HEADER] = session.id
    revoked: list[bool] = []

    def revoke() -> None:  # a reload took the token's scope: the loop below ends
        revoked.append(True)
        session.wake.set()

    slot.on_revoke = revoke
    keepalive = context_of(request).config.node.sse_keepalive_secs
    try:
        await out.open()
        if last.isdigit() and len(last) < 19:
            await _send_numbered(out, session.replay_after(int(last)))
        quiet_since = time.monotonic()
        while not session.ended and not revoked:
            try:  # a client that left is seen within a second, not at the next keep-alive
                await asyncio.wait_for(session.wake.wait(), min(keepalive, GONE_CHECK_SECS))
            except TimeoutError:
                if _gone(request):
                    break
                if time.monotonic() - quiet_since >= keepalive:
                    await out.ping()
                    quiet_since = time.monotonic()
                continue
            if session.generation != generation or revoked:
                break
            taken = session.take()
            if taken:
                await _send_numbered(out, taken)
                quiet_since = time.monotonic()
    except ClientGone:
        pass
    finally:
        session.streams -= 1
        slots.close(slot)
    return out.response


def _gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def _send_numbered(out: SseOut, messages: list[tuple[int, dict[str, Any]]]) -> None:
    for number, message in messages:
        await out.send_event(str(number), message)


async def mcp_delete(request: web.Request) -> web.Response:
    agent = _mcp_agent(request)
    session = _session(request, agent)
    if session is None:
        raise Problem(400, f"DELETE ends an MCP session: send its {HEADER}")
    request.app[SESSIONS].end(session.id)
    return web.Response(status=204)
