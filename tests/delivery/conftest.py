"""The delivery tests' shared fixtures."""

from __future__ import annotations

import httpx
import pytest

from tests.support import OPERATE_TOKEN, auth


@pytest.fixture
async def http():
    """An HTTP client with the operate token, for the node's API."""
    async with httpx.AsyncClient(headers=auth(OPERATE_TOKEN), timeout=30) as client:
        yield client
