"""The public discovery documents: agent card, DID document and agents.md."""

from __future__ import annotations

import pytest
from nacl.signing import SigningKey

from eventstore.keys import public_key_multibase, verify_key_from_multibase
from node.api.discovery import did_web
from node.app import build_app
from node.context import CONTEXT
from node.ops.version import __version__
from tests.support import make_config, tiny_component

AGENTS = """
[[agents]]
name = "payer"
description = "Pays approved invoices"
component = "agent.wasm"
mcp = true
[agents.capabilities]
spend = true
http_fetch = false

[[agents]]
name = "watcher"
component = "agent.wasm"
"""


@pytest.fixture
async def client(tmp_path, aiohttp_client):
    tiny_component(tmp_path / "agent.wasm")
    config = make_config(tmp_path, AGENTS, port=8080)
    return await aiohttp_client(build_app(config))


async def test_agent_card_lists_the_hosted_agents_as_skills(client):
    response = await client.get("/.well-known/agent-card.json")
    assert response.status == 200
    card = await response.json()
    assert card["name"] == "node-a"
    assert card["url"] == "http://127.0.0.1:8080"
    assert card["version"] == __version__
    assert card["capabilities"] == {
        "streaming": True,
        "pushNotifications": True,
        "extendedAgentCard": False,
    }
    assert card["defaultInputModes"] == card["defaultOutputModes"] == ["application/json"]
    assert isinstance(card["description"], str) and card["description"]
    assert card["skills"] == [
        {
            "id": "payer",
            "name": "payer",
            "description": "Pays approved invoices",
            "tags": ["spend", "mcp"],
        },
        {
            "id": "watcher",
            "name": "watcher",
            "description": "Agent watcher on node node-a",
            "tags": [],
        },
    ]
    # the interfaces of one card reach one agent: the first; each has its own card too
    assert card["supportedInterfaces"] == [
        {
            "url": "http://127.0.0.1:8080/a2a/payer",
            "protocolBinding": "JSONRPC",
            "protocolVersion": "1.0",
        }
    ]
    # every /a2a/<agent> needs a bearer token, and the card says so (A2A 1.0 §4.5)
    (scheme,) = card["securitySchemes"].values()
    assert scheme["httpAuthSecurityScheme"]["scheme"] == "Bearer"
    assert list(card["securitySchemes"]) == ["bearer"]
    assert card["securityRequirements"] == [{"schemes": {"bearer": {"list": []}}}]


async def test_did_document_publishes_the_node_key(client):
    response = await client.get("/.well-known/did.json")
    assert response.status == 200
    doc = await response.json()
    did = "did:web:127.0.0.1%3A8080"
    assert doc["@context"] == "https://www.w3.org/ns/did/v1"
    assert doc["id"] == did
    [method] = doc["verificationMethod"]
    assert method["id"] == f"{did}#key-1"
    assert method["type"] == "Ed25519VerificationKey2020"
    assert method["controller"] == did
    key = client.app[CONTEXT].key.verify_key
    assert method["publicKeyMultibase"] == public_key_multibase(key)
    assert verify_key_from_multibase(method["publicKeyMultibase"]) == key
    assert doc["authentication"] == [method["id"]]
    assert doc["assertionMethod"] == [method["id"]]


def test_did_key_test_vector_and_did_web_forms():
    key = SigningKey(bytes(32)).verify_key
    assert public_key_multibase(key) == "z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp"
    assert did_web("http://127.0.0.1:8080") == "did:web:127.0.0.1%3A8080"
    assert did_web("https://node.example/") == "did:web:node.example"
    assert did_web("https://node.example:8443/mesh/a") == "did:web:node.example%3A8443:mesh:a"


async def test_agents_md_is_markdown_with_title_version_agents_and_api(client):
    response = await client.get("/.well-known/agents.md")
    assert response.status == 200
    assert response.content_type == "text/markdown"
    assert response.charset == "utf-8"
    text = await response.text()
    lines = text.splitlines()
    assert lines[0] == "# node-a"
    assert f"Runtime version: agent-node {__version__}" in lines
    agents = text.split("## Agents", 1)[1].split("## API", 1)[0]
    assert "- **payer**: Pays approved invoices" in agents
    assert "- **watcher**" in agents
    api = text.split("## API", 1)[1]
    assert "http://127.0.0.1:8080/api/v1" in api
    assert "http://127.0.0.1:8080/api/v1/a2a/tasks" in api


async def test_discovery_needs_no_token_and_the_version_is_the_metrics_one(client):
    for path in ("/.well-known/agent-card.json", "/.well-known/did.json", "/.well-known/agents.md"):
        assert (await client.get(path)).status == 200
    metrics = client.app[CONTEXT].metrics.render().decode()
    assert f'version="{__version__}"' in metrics
