"""The language-model server every inference test talks to (tests/llm_support.py)."""

from __future__ import annotations

import pytest

from tests.llm_support import LLM


@pytest.fixture
async def llm(aiohttp_server) -> LLM:
    model = LLM()
    server = await aiohttp_server(model.app())
    model.port = server.port
    return model
