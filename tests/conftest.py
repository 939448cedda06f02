from __future__ import annotations

import os

import pytest
from aiohttp.test_utils import TestClient

from node.api import conformance
from node.app import build_app
from node.config.model import Config
from node.runtime.compiled_cache import COMPILED_CACHE_ENV
from tests.runtime_support import COMPILED_CACHE
from tests.support import make_config
from tests.wheel_support import PureWheel, build_pure_wheel

# built_agents: the agents of agents/, built once per session (tests/conftest_agents.py)
pytest_plugins = ["tests.conftest_agents", "tests.leakcheck"]
# tests.leakcheck: the session fails when a process the tests started is still alive at its end

# The responses the suite produces, in this process and in the node processes it starts, are
# checked against the node's OpenAPI document (node/api/conformance.py): the first 25 of each
# route and status of every app (an app a test builds: all of them, in practice), then one in
# twenty (the polls of a long-lived node: jsonschema's check is most of such a request's CPU).
os.environ[conformance.ENV] = conformance.SAMPLE
# Every node the suite starts (in this process and as a subprocess) loads its agents from the
# session's compiled cache, filled once before the first test (tests/conftest_agents.py), instead
# of compiling them into each test's new data dir: seconds per agent per test otherwise, and
# minutes under load. Tests of compiling itself set their own cache dir.
os.environ.setdefault(COMPILED_CACHE_ENV, str(COMPILED_CACHE))


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


@pytest.fixture(scope="session")
def pure_wheel(tmp_path_factory) -> PureWheel:
    """The package built where no C compiler exists and installed alone (tests/wheel_support.py)."""
    return build_pure_wheel(tmp_path_factory.mktemp("wheel"))
