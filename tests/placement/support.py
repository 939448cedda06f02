"""Placement tests' common parts: a node's real NATS connection (node.sync.nats.link.connect:
its inbox prefix, its user when given) to real nats-servers, and a mesh config for it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from nats.errors import Error as NatsError
from nats.js import JetStreamContext

from node.config.model import MeshSection
from node.sync.nats.link import connect, ensure_stream
from tests.nats_support import member_password


def mesh_section(urls: list[str], user: str | None = None, **keys: object) -> MeshSection:
    credentials: dict[str, object] = {}
    if user is not None:
        credentials = {"nats_user": user, "nats_password": member_password(user)}
    return MeshSection(transport="nats", nats_servers=urls, **credentials, **keys)  # type: ignore[arg-type]


async def _nothing() -> None:
    pass


@contextlib.asynccontextmanager
async def jetstream(mesh: MeshSection, node: str) -> AsyncIterator[JetStreamContext]:
    nc = await connect(mesh, node, _nothing)
    try:
        js = nc.jetstream(timeout=5)
        # the mesh's stream, as the node's sync link makes it before placement starts: the
        # lease log is in it (node/placement/leaselog.py). A user the permissions do not let
        # create it uses the one another connection made.
        with contextlib.suppress(NatsError):
            await ensure_stream(js, mesh)
        yield js
    finally:
        with contextlib.suppress(Exception):  # a test may have killed the server
            await nc.close()
