from __future__ import annotations

import os

import pytest
from aiohttp.test_utils import TestClient

from node.api import conformance
from node.app import build_app
from node.config import Config
from tests.support import make_config

# built_agents: the agents of agents/, built once per session (tests/conftest_agents.py)
pytest_plugins = ["tests.conftest_agents"]

# Every response the suite produces, in this process and in the node processes it starts, is
# checked against the node's OpenAPI document (node/api/conformance.py).
os.environ[conformance.ENV] = "1"


@pytest.fixture(autouse=True)
def responses_match_the_document():
    before = len(conformance.VIOLATIONS)
    yield
    assert conformance.VIOLATIONS[before:] == []


@pytest.fixture
def config(tmp_path) -> Config:
    return make_config(tmp_path)


@pytest.fixture
async def client(aiohttp_client, config) -> TestClient:
    """The node's app on aiohttp's test server, with a fresh LMDB journal in tmp_path."""
    return await aiohttp_client(build_app(config))
