"""A started store on real LMDB in a temp dir, signing with a fixed real key."""

import pytest

from eventstore.store import EventStore
from tests.eventstore.support import KEY


@pytest.fixture
async def store(tmp_path):
    s = EventStore(tmp_path / "journal", KEY, "node-a")
    s.start()
    yield s
    await s.close()
