"""LeaseBook against real nats-servers: signed records under each node's own key, claims
ordered by who wrote first, renewals, expiry, self-fencing before the server forgets the key,
release, junk ignored and reported, a bucket made with other settings refused, and a lease lost
with its server."""

from __future__ import annotations

import asyncio
import time

import msgspec
import pytest
from nacl.signing import SigningKey
from nats.js.api import StreamConfig

from node.placement.buckets import BucketError
from node.placement.leases import LeaseBook, LeaseError, LeaseRecord, lease_key, sign_record
from node.sync.nats.subjects import Bucket, bucket_name, kv_stream, kv_subject
from tests.nats_support import NatsCluster
from tests.placement.support import jetstream, mesh_section
from tests.polling import until

pytestmark = pytest.mark.timeout(120)
TTL = 2.0


class Hooks:
    """What the book told its owner: fence deadlines and lost leases, with their times."""

    def __init__(self) -> None:
        self.fences: list[tuple[str, float | None]] = []
        self.lost: list[tuple[str, str, float]] = []
        self.junk: list[tuple[str, str, str]] = []

    def fence(self, journal: str, deadline: float | None) -> None:
        self.fences.append((journal, deadline))

    def on_lost(self, agent: str, reason: str) -> None:
        self.lost.append((agent, reason, time.monotonic()))

    def on_junk(self, agent: str, node: str, why: str) -> None:
        self.junk.append((agent, node, why))


KEYS = {name: SigningKey(bytes([i + 1]) * 32) for i, name in enumerate(["node-a", "node-b"])}
KEYS["node-x"] = SigningKey(b"x" * 32)


def lookup(node: str):
    key = KEYS.get(node)
    return key.verify_key if key is not None else None


def book(node: str, mesh, hooks: Hooks | None = None) -> LeaseBook:
    hooks = hooks or Hooks()
    return LeaseBook(
        node,
        mesh,
        KEYS[node],
        lookup,
        fence=hooks.fence,
        on_lost=hooks.on_lost,
        on_junk=hooks.on_junk,
    )


@pytest.fixture
def one_server(tmp_path):
    servers = NatsCluster(tmp_path / "nats", 1).start()
    yield servers
    servers.kill()


@pytest.fixture
def three_servers(tmp_path):
    servers = NatsCluster(tmp_path / "nats", 3).start()
    yield servers
    servers.kill()


async def test_two_nodes_claiming_an_epoch_agree_which_claim_came_first_on_3_servers(
    three_servers,
):
    """Each node writes only its own record; both read the same order (the stream's), so of
    two nodes racing for a takeover exactly one sees its own claim first."""
    servers = three_servers
    mesh = mesh_section(servers.urls, lease_ttl_secs=TTL, stream_replicas=3)
    async with jetstream(mesh, "node-a") as js_a, jetstream(mesh, "node-b") as js_b:
        a, b = book("node-a", mesh), book("node-b", mesh)
        await a.attach(js_a)
        await b.attach(js_b)
        for round_ in range(5):
            agent = f"agent-{round_}"
            await asyncio.gather(a.acquire(agent, 1), b.acquire(agent, 1))
            seen_a = await a.contenders(agent, ["node-a", "node-b"], 1)
            seen_b = await b.contenders(agent, ["node-a", "node-b"], 1)
            assert [v.holder for v in seen_a] == [v.holder for v in seen_b]
            assert {v.holder for v in seen_a} == {"node-a", "node-b"}
            first = seen_a[0]
            held = (a if first.holder == "node-a" else b).held()[agent]
            assert first.revision == held.revision
            assert 0 < first.expires_in <= TTL
            assert await a.contenders(agent, ["node-a", "node-b"], 2) == []  # other epochs
        # a second acquire at the same epoch is the lease held, not a new write
        assert await a.acquire("agent-0", 1) is a.held()["agent-0"]


async def test_renewing_keeps_the_lease_and_moves_valid_until(one_server):
    servers = one_server
    mesh = mesh_section(servers.urls, lease_ttl_secs=TTL)
    hooks = Hooks()
    async with jetstream(mesh, "node-a") as js_a, jetstream(mesh, "node-b") as js_b:
        a, b = book("node-a", mesh, hooks), book("node-b", mesh)
        await a.attach(js_a)
        await b.attach(js_b)
        lease = await a.acquire("alpha", 0)
        assert lease is not None
        first_until, first_revision = lease.valid_until, lease.revision
        assert hooks.fences == [("alpha", first_until)]
        renewer = asyncio.create_task(a.run())
        try:
            started = time.monotonic()
            while time.monotonic() - started < 3 * TTL:  # three TTLs: it would have expired
                view = await b.peek("alpha", "node-a")
                assert view is not None and (view.holder, view.epoch) == ("node-a", 0)
                assert a.valid_until("alpha") > time.monotonic()
                await asyncio.sleep(0.2)
        finally:
            renewer.cancel()
        assert not hooks.lost
        assert a.held()["alpha"].revision > first_revision
        assert a.valid_until("alpha") > first_until + TTL
        deadlines = [d for j, d in hooks.fences if j == "alpha"]
        assert len(deadlines) >= 3 * TTL / (TTL / 4) - 2  # renewed every quarter TTL
        assert deadlines == sorted(deadlines)


@pytest.fixture(params=[1, 3], ids=["1-server", "3-servers"])
def servers(request, tmp_path):
    made = NatsCluster(tmp_path / "nats", request.param).start()
    yield made
    made.kill()


async def test_a_stopped_renewer_stops_writing_before_the_server_lets_another_node_in(servers):
    """node-a renews, then cannot (its connection is gone for it): its valid_until passes and
    it says so (fence at 0, on_lost) before the server forgets the key, which happens within
    the TTL of a's last renew; then node-b acquires it. The order is measured, on one server
    and on a 3-server cluster (3 replicas: each expires by its own clock)."""
    size = len(servers.servers)
    mesh = mesh_section(servers.urls, lease_ttl_secs=TTL, stream_replicas=size)
    hooks = Hooks()
    async with jetstream(mesh, "node-a") as js_a, jetstream(mesh, "node-b") as js_b:
        a, b = book("node-a", mesh, hooks), book("node-b", mesh)
        await a.attach(js_a)
        await b.attach(js_b)
        assert await a.acquire("alpha", 0) is not None
        renewer = asyncio.create_task(a.run())
        try:
            await asyncio.sleep(TTL)
            until_before = a.valid_until("alpha")
            a.detach()  # renews fail from now on, as with a partition
            last_renew_sent = until_before - (TTL - a.margin)
            last_seen = time.monotonic()

            async def gone() -> bool:
                nonlocal last_seen
                if await b.peek("alpha", "node-a") is not None:
                    last_seen = time.monotonic()
                    return False
                return True

            await until(gone, 3 * TTL, "node-b sees node-a's lease gone", 0.01)
            noticed = time.monotonic()
        finally:
            renewer.cancel()
    assert [(agent, reason) for agent, reason, _ in hooks.lost] == [("alpha", "unrenewed")]
    lost_at = hooks.lost[0][2]
    assert hooks.fences[-1] == ("alpha", 0.0)
    # the order: a's valid_until, a's loss, then the server's expiry (after b last saw it)
    assert until_before <= lost_at < last_seen < noticed
    assert noticed - last_renew_sent <= TTL + 1.0  # expired within the TTL (+ polling)
    print(
        f"{size} server(s): valid_until → server expiry ≥ {last_seen - until_before:.3f} s "
        f"(margin {a.margin:.2f} s); expiry {noticed - last_renew_sent:.3f} s after the "
        f"last renew was sent (ttl {TTL} s)"
    )


async def test_release_deletes_the_record_at_once(one_server):
    servers = one_server
    mesh = mesh_section(servers.urls, lease_ttl_secs=TTL)
    hooks = Hooks()
    async with jetstream(mesh, "node-a") as js_a, jetstream(mesh, "node-b") as js_b:
        a, b = book("node-a", mesh, hooks), book("node-b", mesh)
        await a.attach(js_a)
        await b.attach(js_b)
        await a.acquire("alpha", 0)
        assert (await b.peek("alpha", "node-a")) is not None
        assert await a.release("alpha") is True
        assert hooks.fences[-1] == ("alpha", 0.0) and "alpha" not in a.held()
        assert await b.peek("alpha", "node-a") is None  # no TTL to wait for
        assert await a.release("alpha") is False  # nothing held
        lease = await a.acquire("alpha", 1)  # over its own delete marker
        assert (await b.peek("alpha", "node-a")).epoch == 1 == lease.epoch


async def test_junk_or_a_forged_record_under_a_key_counts_as_no_lease_and_is_reported(one_server):
    """What a member writes under its own key that is not its signed record (junk, a record
    naming another node, another agent, or signed by another key) is no lease, and said so."""
    servers = one_server
    mesh = mesh_section(servers.urls, lease_ttl_secs=TTL)
    hooks = Hooks()
    bucket = bucket_name("default", Bucket.LEASES)
    async with jetstream(mesh, "node-a") as js_a, jetstream(mesh, "node-x") as js_x:
        a = book("node-a", mesh, hooks)
        await a.attach(js_a)
        await a.acquire("alpha", 0)
        forged = [
            b'{"holder": "node-x"',
            sign_record(KEYS["node-x"], LeaseRecord("alpha", "node-a", 5, 0.0)),  # names a
            sign_record(KEYS["node-x"], LeaseRecord("beta", "node-x", 5, 0.0)),  # other agent
            sign_record(KEYS["node-a"], LeaseRecord("alpha", "node-x", 5, 0.0)),  # a's key
        ]
        for junk in forged:
            await js_x.publish(kv_subject(bucket, lease_key("alpha", "node-x")), junk)
            assert await a.peek("alpha", "node-x") is None
        assert [(agent, node) for agent, node, _ in hooks.junk] == [("alpha", "node-x")] * 4
        assert await a.contenders("alpha", ["node-a", "node-x"], 5) == []
        good = sign_record(KEYS["node-x"], LeaseRecord("alpha", "node-x", 5, 0.0))
        await js_x.publish(kv_subject(bucket, lease_key("alpha", "node-x")), good)
        assert (await a.peek("alpha", "node-x")).epoch == 5
        assert await a.renew("alpha") is True  # a's own record is untouched by any of it
        assert hooks.lost == []


async def test_a_bucket_made_by_someone_else_with_another_ttl_is_refused(one_server):
    """A member that creates the leases bucket first with a TTL of a year does not make every
    lease last a year: the bucket is not used, and the error says what to do."""
    mesh = mesh_section(one_server.urls, lease_ttl_secs=TTL)
    bucket = bucket_name("default", Bucket.LEASES)
    async with jetstream(mesh, "node-x") as js_x, jetstream(mesh, "node-a") as js_a:
        await js_x.add_stream(
            StreamConfig(
                name=kv_stream(bucket),
                subjects=[f"$KV.{bucket}.>"],
                max_age=365 * 86400.0,
                max_msgs_per_subject=1,
                deny_delete=True,
                deny_purge=True,
                allow_rollup_hdrs=False,
            )
        )
        with pytest.raises(BucketError, match=r"keeps keys 3\.1536e\+07 s, not 1\.98-2\.02 s"):
            await book("node-a", mesh).attach(js_a)


async def test_the_lease_is_lost_and_fenced_when_the_server_goes_away(one_server):
    servers = one_server
    mesh = mesh_section(servers.urls, lease_ttl_secs=TTL)
    hooks = Hooks()
    async with jetstream(mesh, "node-a") as js_a:
        a = book("node-a", mesh, hooks)
        await a.attach(js_a)
        assert await a.acquire("alpha", 0) is not None
        renewer = asyncio.create_task(a.run())
        try:
            await asyncio.sleep(TTL / 2)
            servers.kill()
            killed = time.monotonic()
            await until(lambda: hooks.lost, TTL + 2, "the lease lost")
        finally:
            renewer.cancel()
        agent, reason, lost_at = hooks.lost[0]
        assert (agent, reason) == ("alpha", "unrenewed")
        assert lost_at - killed <= TTL - a.margin + 0.3  # at the last valid_until at the latest
        assert hooks.fences[-1] == ("alpha", 0.0)
        assert a.held() == {}
        with pytest.raises(LeaseError):
            await a.peek("alpha", "node-a")


def test_lease_records_are_small_signed_json():
    value = sign_record(KEYS["node-a"], LeaseRecord("alpha", "node-a", 3, 1.5))
    assert len(value) < 400
    decoded = msgspec.json.decode(value)
    assert decoded["signature"].startswith("ed25519:")
    assert msgspec.json.decode(decoded["record"])["epoch"] == 3


async def test_a_lease_outlives_the_kill_of_its_buckets_leader_on_a_3_server_cluster(
    three_servers,
):
    """The leases bucket has 3 replicas: when its leader is killed, a new one is elected and
    the renewals go on. An election took 4.5-5 s here (nats-server 2.15), so the TTL is 15 s:
    with 10 s a renew due 2.5 s before the kill leaves 5.5 s, too close (docs/mesh.md)."""
    ttl = 15.0
    mesh = mesh_section(three_servers.urls, lease_ttl_secs=ttl, stream_replicas=3)
    hooks = Hooks()
    async with jetstream(mesh, "node-a") as js_a, jetstream(mesh, "node-b") as js_b:
        a, b = book("node-a", mesh, hooks), book("node-b", mesh)
        await a.attach(js_a)
        await b.attach(js_b)
        assert await a.acquire("alpha", 0) is not None
        renewer = asyncio.create_task(a.run())
        try:
            info = await js_b.stream_info(kv_stream(bucket_name("default", Bucket.LEASES)))
            leader = next(s for s in three_servers.servers if s.name == info.cluster.leader)
            leader.kill()
            killed, revision = time.monotonic(), a.held()["alpha"].revision
            await until(
                lambda: a.held().get("alpha") and a.held()["alpha"].revision > revision,
                ttl,
                "renewals with the new leader",
            )
            print(f"renewing again {time.monotonic() - killed:.2f} s after the leader's kill")
            assert (await b.peek("alpha", "node-a")).epoch == 0
        finally:
            renewer.cancel()
    assert hooks.lost == []


async def test_a_renew_written_but_unanswered_is_recognised_and_the_lease_kept(one_server):
    """A renew that times out on this side may still reach the server (its answer is what
    got lost): the next renew's compare-and-set is then refused, and the book finds its own
    value in the key and goes on from that revision instead of giving the lease up."""
    mesh = mesh_section(one_server.urls, lease_ttl_secs=TTL)
    hooks = Hooks()
    async with jetstream(mesh, "node-a") as js_a:
        a = book("node-a", mesh, hooks)
        await a.attach(js_a)
        lease = await a.acquire("alpha", 0)
        assert lease is not None
        first = lease.revision
        logged = a._log

        async def log_then_hurry(agent: str, value: bytes) -> int:
            position = await logged(agent, value)  # the lease log's record goes through
            a.call_timeout = 1e-9  # the bucket's request goes out; its answer is not waited for
            return position

        a._log = log_then_hurry  # type: ignore[method-assign]
        assert await a.renew("alpha") is False
        a._log = logged  # type: ignore[method-assign]
        a.call_timeout = 1.0
        assert len(a.held()["alpha"].unsure) == 1
        await until(lambda: _revision(a, "alpha", first + 1), 5, "the unanswered renew written")
        assert await a.renew("alpha") is True  # refused by revision, then recognised
        assert a.held()["alpha"].revision == first + 1 and hooks.lost == []
        assert await a.renew("alpha") is True
        assert a.held()["alpha"].revision == first + 2


async def _revision(book_: LeaseBook, agent: str, revision: int) -> bool:
    view = await book_.peek(agent, book_.node)
    return view is not None and view.revision == revision
