"""The public discovery documents: A2A agent card, DID document (did:web), agents.md.

They are built from the config, the node key and the version module only, so they cost
nothing to serve and never need the journal.
"""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import quote, urlsplit

import msgspec
from aiohttp import web

from eventstore.keys import public_key_multibase
from node.context import NodeContext, context_of
from node.ops.version import __version__
from node.web.http import json_response
from node.web.routes import PUBLIC, Doc, add_route
from projections.keys import KeyHistory

DID_CONTEXT = "https://www.w3.org/ns/did/v1"
API_PREFIX = "/api/v1"


class Capabilities(msgspec.Struct):
    streaming: bool
    pushNotifications: bool


class Interface(msgspec.Struct):
    url: str
    protocolBinding: str
    protocolVersion: str


class Skill(msgspec.Struct):
    id: str
    name: str
    description: str
    tags: list[str]


class AgentCard(msgspec.Struct):
    name: str
    description: str
    url: str
    version: str
    capabilities: Capabilities
    supportedInterfaces: list[Interface]
    defaultInputModes: list[str]
    defaultOutputModes: list[str]
    skills: list[Skill]


class VerificationMethod(msgspec.Struct):
    id: str
    type: Literal["Ed25519VerificationKey2020"]
    controller: str
    publicKeyMultibase: str
    revoked: str | None = None  # a key retired by rotation: when (it signed the past only)


class DidDocument(msgspec.Struct):
    context: str = msgspec.field(name="@context")
    id: str
    verificationMethod: list[VerificationMethod]
    authentication: list[str]
    assertionMethod: list[str]


def did_web(public_url: str) -> str:
    """did:web of a URL: host with the port's colon as %3A, path segments joined by colons."""
    parts = urlsplit(public_url)
    host = parts.hostname or "localhost"
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    authority = quote(host if parts.port is None else f"{host}:{parts.port}", safe="[]")
    segments = [quote(s, safe="") for s in parts.path.split("/") if s]
    return ":".join(["did:web", authority, *segments])


def agent_card(ctx: NodeContext) -> dict[str, Any]:
    base = ctx.config.public_url
    return {
        "name": ctx.name,
        "description": f"Agent runtime node {ctx.name}: "
        + (", ".join(a.name for a in ctx.config.agents) or "no agents"),
        "url": base,
        "version": __version__,
        "capabilities": {"streaming": True, "pushNotifications": True},
        # one A2A JSON-RPC endpoint per agent; a client picks the first, or resolves
        # /a2a/<agent>/.well-known/agent-card.json for a given agent (docs/protocols/a2a.md)
        "supportedInterfaces": [
            {"url": f"{base}/a2a/{a.name}", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
            for a in ctx.config.agents
        ],
        "defaultInputModes": ["application/json"],
        "defaultOutputModes": ["application/json"],
        "skills": [
            {
                "id": agent.name,
                "name": agent.name,
                "description": agent.description or f"Agent {agent.name}",
                "tags": sorted(c for c, on in agent.capabilities.items() if on)
                + (["mcp"] if agent.mcp else []),
            }
            for agent in ctx.config.agents
        ],
    }


def did_document(ctx: NodeContext) -> dict[str, Any]:
    """The current key first (`#key-<n>`, n = rotations + 1); after a key rotation each retired
    key follows as `#key-<i>` with `revoked` (its rotation's time) and in no relationship, so
    verifiers know it signed the past and signs nothing new (docs/mesh.md, key rotation)."""
    did = did_web(ctx.config.public_url)
    rotations = ctx.projections.get(KeyHistory).retired(ctx.name)
    key_id = f"{did}#key-{len(rotations) + 1}"
    retired = [
        {
            "id": f"{did}#key-{i + 1}",
            "type": "Ed25519VerificationKey2020",
            "controller": did,
            "publicKeyMultibase": rotation.previous_public_key,
            "revoked": rotation.ts,
        }
        for i, rotation in reversed(list(enumerate(rotations)))
    ]
    return {
        "@context": DID_CONTEXT,
        "id": did,
        "verificationMethod": [
            {
                "id": key_id,
                "type": "Ed25519VerificationKey2020",
                "controller": did,
                "publicKeyMultibase": public_key_multibase(ctx.key.verify_key),
            },
            *retired,
        ],
        "authentication": [key_id],
        "assertionMethod": [key_id],
    }


def agents_markdown(ctx: NodeContext) -> str:
    api = ctx.config.public_url + API_PREFIX
    lines = [f"# {ctx.name}", "", f"Runtime version: agent-node {__version__}", "", "## Agents", ""]
    if ctx.config.agents:
        lines += [f"- **{a.name}**: {a.description or 'no description'}" for a in ctx.config.agents]
    else:
        lines.append("- (no agents are hosted on this node)")
    lines += [
        "",
        "## API",
        "",
        f"- Base URL: {api}",
        f"- A2A tasks: {api}/a2a/tasks",
        f"- OpenAPI document: {api}/openapi.json",
        f"- Agent card: {ctx.config.public_url}/.well-known/agent-card.json",
        "",
    ]
    return "\n".join(lines)


async def get_agent_card(request: web.Request) -> web.Response:
    return json_response(agent_card(context_of(request)))


async def get_did(request: web.Request) -> web.Response:
    return json_response(did_document(context_of(request)))


async def get_agents_md(request: web.Request) -> web.Response:
    return web.Response(
        text=agents_markdown(context_of(request)), content_type="text/markdown", charset="utf-8"
    )


def setup(app: web.Application) -> None:
    add_route(
        app,
        "GET",
        "/.well-known/agent-card.json",
        get_agent_card,
        PUBLIC,
        Doc("A2A agent card", "discovery", AgentCard),
    )
    add_route(
        app,
        "GET",
        "/.well-known/did.json",
        get_did,
        PUBLIC,
        Doc("DID document (did:web)", "discovery", DidDocument),
    )
    add_route(
        app,
        "GET",
        "/.well-known/agents.md",
        get_agents_md,
        PUBLIC,
        Doc(
            "Markdown summary of the node",
            "discovery",
            content={"text/markdown": {"type": "string"}},
        ),
    )
