"""POST /api/v1/mcp/{agent}: MCP's streamable HTTP transport for one agent's tool server.

Thin: the transport's own checks, then node/runtime/mcp.py answers. Before anything is
parsed, a present `Origin` must be the node's public URL's or one of `[mcp] allowed_origins`
(403 otherwise: the MCP transport spec's defense against DNS rebinding), and a present
`MCP-Protocol-Version` must be a version the node speaks (400 otherwise). A `tools/call` whose
client accepts `text/event-stream` is answered as a stream: the agent's log lines and progress
while the tool runs, as MCP notifications, then the response; everything else is one JSON
answer (202 without a body for a notification).
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

from aiohttp import web

from node.context import context_of
from node.runtime.agents import AGENTS
from node.runtime.mcp import KNOWN_PROTOCOLS, McpServer
from node.streams.sse import ClientGone, SseOut, sse_content
from node.web import jsonrpc as rpc
from node.web.auth import identity_of
from node.web.body import read_body
from node.web.http import Problem, json_response
from node.web.routes import Doc, add_route

PATH = "/api/v1/mcp/{agent}"
VERSION_HEADER = "MCP-Protocol-Version"
DEFAULT_PORTS = {"http": 80, "https": 443}


def setup(app: web.Application) -> None:
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
            "Not supported (no server-to-client stream is offered)",
            "agents",
            errors=(400, 403, 404, 405),
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


async def mcp(request: web.Request) -> web.StreamResponse:
    agent = _mcp_agent(request)
    server = request.app[AGENTS].mcp
    call = rpc.parse(await read_body(request), notifications=True)
    if isinstance(call, dict):
        return json_response(call)
    if call.notification:
        return web.Response(status=202)
    identity = identity_of(request)
    caller = identity.name if identity is not None else ""
    if call.method == "tools/call" and "text/event-stream" in request.headers.get("Accept", ""):
        return await _streamed(request, server, agent, call, caller)
    return json_response(await server.answer(agent, call, caller))


async def _streamed(
    request: web.Request, server: McpServer, agent: str, call: rpc.Call, caller: str
) -> web.StreamResponse:
    """The call's notifications as they come, then its response, on one SSE stream. A client
    that leaves does not end the call (a tool cannot be stopped inside wasm): its answer is
    awaited and dropped."""
    notices = server.notices(agent, call, caller)
    answering = asyncio.ensure_future(server.answer(agent, call, caller, notices))
    keepalive = context_of(request).config.node.sse_keepalive_secs
    out = SseOut(request)
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
    return out.response


async def mcp_get(request: web.Request) -> web.Response:
    _mcp_agent(request)
    raise web.HTTPMethodNotAllowed("GET", ["POST"])
