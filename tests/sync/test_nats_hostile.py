"""A hostile member of a NATS mesh: three honest node processes and node-x, a configured peer
(its key pinned everywhere, its own NATS user) that is a raw nats-py client publishing validly
signed envelopes, plus a TCP port that accepts and never answers as its HTTP address."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from pathlib import Path

import msgspec
import nats
import pytest

from eventstore.keys import load_or_create_key
from node.sync.nats.subjects import subject, token
from tests.nats_support import (
    MeshUsers,
    NatsServer,
    as_member,
    nats_mesh_toml,
    stream_envelopes,
    use_nats_user,
)
from tests.support import NodeProcess
from tests.sync.test_nats_mesh import start_all
from tests.sync.test_sync_mesh import Mesh, convergence, journal, post_findings, wait_until
from tests.sync_support import SYNC_TUNING, prefill, signed_chain

pytestmark = pytest.mark.timeout(300)
HONEST = ["node-a", "node-b", "node-c"]
HOSTILE = "node-x"


class Tarpit:
    """A TCP server that accepts every connection, reads whatever comes, and never answers."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.accepted = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Tarpit:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *_: object) -> None:
        async def close() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._loop.stop()

        self._loop.call_soon_threadsafe(lambda: self._loop.create_task(close()))
        self._thread.join(10)

    def _run(self) -> None:
        async def hold(reader: asyncio.StreamReader, _writer: asyncio.StreamWriter) -> None:
            self.accepted += 1
            while await reader.read(65536):
                pass  # never a byte back; the connection stays open until the peer gives up

        async def serve() -> None:
            await asyncio.start_server(hold, "127.0.0.1", self.port)
            self._ready.set()

        self._loop.run_until_complete(serve())
        self._loop.run_forever()


class Hostile:
    """node-x's side of the mesh: its own NATS user (the generated permissions: it may
    publish on its own subjects and heads record only), its own (pinned) key."""

    def __init__(self, url: str, key_dir: Path) -> None:
        self.url = url
        self.key = load_or_create_key(key_dir)

    async def _connect(self) -> nats.NATS:
        return await nats.connect(self.url, **as_member(HOSTILE))

    def publish(self, envelopes: list[dict], junk: int = 0, run: int = 1) -> None:
        """Core publishes on node-x's subjects (the stream takes them all), `run` envelopes
        of a journal per message (a JSON array when more than one), then `junk` messages that
        are no envelope at all."""

        async def publish_all() -> None:
            nc = await self._connect()
            try:
                for i in range(0, len(envelopes), run):
                    group = envelopes[i : i + run]
                    target = subject("default", HOSTILE, group[0]["agent"])
                    assert all(e["agent"] == group[0]["agent"] for e in group)
                    body = group if run > 1 else group[0]
                    await nc.publish(target, msgspec.json.encode(body))
                for i in range(junk):
                    await nc.publish(subject("default", HOSTILE, "junk"), b"\xff{not json %d" % i)
                await nc.flush(10)
            finally:
                await nc.close()

        asyncio.run(publish_all())

    def claim_heads(self, heads: dict[str, int]) -> None:
        """A heads record naming whatever it likes."""

        async def run() -> None:
            nc = await self._connect()
            try:
                record = msgspec.json.encode({"node": HOSTILE, "heads": heads})
                assert len(record) < 1 << 20
                await nc.jetstream().publish(f"$KV.MESH_default_HEADS.{token(HOSTILE)}", record)
            finally:
                await nc.close()

        asyncio.run(run())


def consumer_lag(url: str, node: str) -> tuple[int, int]:
    """(messages not yet delivered, delivered and not acknowledged) of a node's consumer."""

    async def read() -> tuple[int, int]:
        nc = await nats.connect(url, **as_member(node))
        try:
            info = await nc.jetstream().consumer_info("MESH_default", f"node-{token(node)}")
            return int(info.num_pending or 0), int(info.num_ack_pending or 0)
        finally:
            await nc.close()

    return asyncio.run(read())


def head_of(node: NodeProcess, agent: str) -> int:
    return int(convergence(node, agent)["local_seq"])


def metric(node: NodeProcess, name: str) -> float:
    with node.client() as client:
        text = client.get("/api/v1/metrics").text
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


@pytest.fixture
def hostile_mesh(tmp_path):
    """Four members with their own NATS users and generated permissions; node-x never runs
    as a node (the test plays it). Made with the mesh's `[mesh]` extras (retention)."""
    made: list[tuple[MeshUsers, Mesh]] = []

    def make(mesh_lines: str = "", **mesh_options) -> tuple[NatsServer, Mesh]:
        users = MeshUsers(tmp_path / "users", [*HONEST, HOSTILE]).start()
        mesh = Mesh(
            tmp_path / "mesh",
            [*HONEST, HOSTILE],
            extra=SYNC_TUNING + nats_mesh_toml([users.server.url], **mesh_options) + mesh_lines,
        )
        made.append((users, mesh))
        for name in HONEST:
            use_nats_user(mesh.paths[name], name)
            mesh.nodes[name] = NodeProcess(mesh.paths[name])
        return users.server, mesh

    yield make
    for users, mesh in made:
        mesh.kill_all()
        users.kill()


def x_port(mesh: Mesh) -> int:
    """The port the honest nodes know as node-x's HTTP address."""
    text = mesh.paths[HOSTILE].read_text()
    return int(re.search(r'listen = "127\.0\.0\.1:(\d+)"', text).group(1))


def test_a_hostile_member_cannot_stall_or_starve_the_honest_nodes(hostile_mesh, tmp_path):
    server, mesh = hostile_mesh()
    honest = {name: mesh[name] for name in HONEST}
    homes = {"alpha": "node-a", "beta": "node-b", "gamma": "node-c"}
    for agent, home in homes.items():
        prefill(mesh.paths[home], {agent: 1})
    hostile = Hostile(server.url, tmp_path / "mesh" / HOSTILE / "data")
    evil = signed_chain(hostile.key, HOSTILE, "evil", 12)

    with Tarpit(x_port(mesh)) as tarpit:
        start_all(mesh, *HONEST)
        hostile.publish(evil[:3])  # node-x is a member in good standing: evil#1..3 are taken
        for name, node in honest.items():
            wait_until(lambda n=node: head_of(n, "evil") == 3, 30, f"{name} has evil#3")

        # a signed gap (evil#10..12; 4..9 nowhere) while node-x's HTTP is a tarpit, false
        # heads (its own journal far ahead, another node's journal, a thousand and more
        # journals that do not exist), and a flood: a valid chain, gaps in hundreds of new
        # journals, messages that are no envelope
        hostile.publish(evil[9:])
        fake = {f"fake-{i}": 1_000_000 for i in range(5000)}
        hostile.claim_heads({"evil": 10**9, "alpha": 10**9, **fake})
        spam = signed_chain(hostile.key, HOSTILE, "spam", 3000)
        gapped = [
            signed_chain(hostile.key, HOSTILE, f"hole-{i}", 1, start=5)[0] for i in range(300)
        ]
        hostile.publish(spam, run=100)
        hostile.publish(gapped, junk=200)

        # the honest nodes go on delivering each other's envelopes within seconds, past the
        # 20 s stall watchdog and the 30 s of the old inline repair, for 35 s
        latencies: list[float] = []
        counts = {agent: 1 for agent in homes}
        deadline = time.monotonic() + 35
        turn = 0
        while time.monotonic() < deadline:
            agent = list(homes)[turn % 3]
            turn += 1
            post_findings(mesh[homes[agent]], agent, 1)
            counts[agent] += 1
            posted = time.monotonic()
            for name, node in honest.items():
                wait_until(
                    lambda n=node, a=agent, c=counts[agent]: head_of(n, a) == c,
                    30,
                    f"{name} gets {agent}#{counts[agent]}",
                )
            latencies.append(time.monotonic() - posted)
            time.sleep(0.5)
        print("delivery latencies (s):", [round(x, 2) for x in latencies])
        assert max(latencies) < 10, latencies
        assert tarpit.accepted > 0  # the repair did ask node-x, and was not held by it

        # the flood's valid part is delivered; the gap is not filled by anyone
        for name, node in honest.items():
            wait_until(lambda n=node: head_of(n, "spam") == 3000, 60, f"{name} has spam")
            assert head_of(node, "evil") == 3
            assert head_of(node, "fake-1") == 0

        # node-x's claims did not pan out: demoted, reported once by every honest node
        def reported(node: NodeProcess) -> bool:
            title = f"peer {HOSTILE} reports heads it does not serve"
            return title in {f["title"] for f in all_findings(node)}

        for name, node in honest.items():
            wait_until(lambda n=node: reported(n), 90, f"{name} reports node-x's heads")

        # every honest node is killed and restarted: what their consumers acknowledged
        # unapplied (evil#10..12) is remembered on disk, and nobody else holds it
        for node in honest.values():
            node.kill()
        start_all(mesh, *HONEST)
        # the missing envelopes appear on the stream after the gapped ones: evil#4..9 are
        # taken from the consumer, evil#10..12 (acknowledged, unapplied) are read again from
        # the stream, since no peer serves them over HTTP
        hostile.publish(evil[3:9])
        for name, node in honest.items():
            wait_until(lambda n=node: head_of(n, "evil") == 12, 60, f"{name} re-reads evil")

    # nothing acknowledged is lost: the consumers acknowledged everything, every honest node
    # holds every honest envelope, and so does the stream
    for name, node in honest.items():
        wait_until(lambda n=name: consumer_lag(server.url, n) == (0, 0), 30, f"{name} acks")
        assert "stalled" not in node.log_path.read_text()
        jobs = metric(node, "svc_nats_repair_jobs")
        assert jobs <= 1000 + 300 + 10, jobs  # the claims and the gaps are bounded
    in_stream = stream_envelopes([server.url], user="node-a")
    for agent, home in homes.items():
        copies = [journal(node, agent) for node in honest.values()]
        assert [seq for seq, _, _ in copies[0]] == list(range(1, counts[agent] + 1))
        assert copies[1] == copies[0] and copies[2] == copies[0], agent
        # the stream holds every honest envelope (the prefilled seq 1 was published too)
        held = sorted(q for subj, a, q in in_stream if a == agent)
        assert held == list(range(1, counts[agent] + 1)), agent
        assert {subj for subj, a, _ in in_stream if a == agent} == {subject("default", home, agent)}


def all_findings(node: NodeProcess) -> list[dict]:
    out: list[dict] = []
    since = 0
    with node.client() as client:
        while True:
            page = client.get("/api/v1/findings", params={"since": since, "limit": 1000}).json()
            out += page["findings"]
            if not page["findings"]:
                return out
            since = page["next_seq"]


def test_a_repair_past_retention_does_not_wait_for_a_liar(hostile_mesh, tmp_path):
    """node-c comes back after the stream aged out alpha's envelopes, alpha's home is down,
    and node-x (HTTP: a tarpit) claims alpha far ahead and thousands of journals: node-c
    pulls alpha from node-b within seconds, and never asks node-x for a journal it only
    claims."""
    # a request that never answers costs 20 s here: one in the path would show
    server, mesh = hostile_mesh("repair_timeout_secs = 20\n", max_age=2)
    prefill(mesh.paths["node-a"], {"alpha": 1})
    hostile = Hostile(server.url, tmp_path / "mesh" / HOSTILE / "data")
    with Tarpit(x_port(mesh)) as tarpit:
        start_all(mesh, *HONEST)
        post_findings(mesh["node-a"], "alpha", 4)
        for name in HONEST:
            wait_until(lambda n=name: head_of(mesh[n], "alpha") == 5, 30, f"{name}: alpha")
        mesh["node-c"].kill()
        post_findings(mesh["node-a"], "alpha", 20)
        wait_until(lambda: head_of(mesh["node-b"], "alpha") == 25, 30, "b has alpha#25")
        wait_until(
            lambda: not [a for _, a, _ in stream_envelopes([server.url], user="node-a")],
            30,
            "the stream to age out",
        )
        mesh["node-a"].kill()  # the home is down: node-b relays
        fake = {f"fake-{i}": 1_000_000 for i in range(3000)}
        hostile.claim_heads({"alpha": 10**9, **fake})
        mesh["node-c"].start()
        started = time.monotonic()
        wait_until(lambda: head_of(mesh["node-c"], "alpha") == 25, 30, "c repairs alpha")
        took = time.monotonic() - started
        print(f"alpha repaired on node-c {took:.1f} s after its start")
        assert journal(mesh["node-c"], "alpha") == journal(mesh["node-b"], "alpha")
        assert metric(mesh["node-c"], "svc_nats_repaired_envelopes_total") == 20
        assert took < 15, took
        assert "stalled" not in mesh["node-c"].log_path.read_text()
        # node-x's claim of alpha is capped at what alpha's home reported (25, as node-b's):
        # uncapped (10^9) it would have been asked first, behind its own fake journals
        assert "repair of alpha from node-x" not in mesh["node-c"].log_path.read_text()
        print(f"node-x's tarpit took {tarpit.accepted} connection(s)")
