"""LeaseBook against real nats-servers: one holder at a time, renewals, expiry, self-fencing
before the server can let another node in, release, and a lease lost with its server."""

from __future__ import annotations

import asyncio
import time

import msgspec
import pytest

from node.placement.leases import HeldLease, LeaseBook, LeaseError
from node.sync.nats_subjects import Bucket, bucket_name, kv_stream, kv_subject, token
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

    def fence(self, journal: str, deadline: float | None) -> None:
        self.fences.append((journal, deadline))

    def on_lost(self, agent: str, reason: str) -> None:
        self.lost.append((agent, reason, time.monotonic()))


def book(node: str, mesh, hooks: Hooks | None = None) -> LeaseBook:
    hooks = hooks or Hooks()
    return LeaseBook(node, mesh, fence=hooks.fence, on_lost=hooks.on_lost)


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


async def test_two_nodes_race_for_a_lease_on_a_3_server_cluster_and_exactly_one_wins(
    three_servers,
):
    servers = three_servers
    mesh = mesh_section(servers.urls, lease_ttl_secs=TTL, stream_replicas=3)
    async with jetstream(mesh, "node-a") as js_a, jetstream(mesh, "node-b") as js_b:
        a, b = book("node-a", mesh), book("node-b", mesh)
        await a.attach(js_a)
        await b.attach(js_b)
        for round_ in range(5):
            agent = f"agent-{round_}"
            won = await asyncio.gather(a.acquire(agent, 1), b.acquire(agent, 1))
            assert sum(lease is not None for lease in won) == 1, won
            winner = "node-a" if won[0] is not None else "node-b"
            view = await b.holder(agent)
            assert view is not None and (view.holder, view.epoch) == (winner, 1)
            assert view.revision == next(x for x in won if x is not None).revision
            assert 0 < view.expires_in <= TTL
        # a third try by the loser, and by the winner itself, is refused while it is held
        assert await a.acquire("agent-0", 2) is (a.held().get("agent-0"))
        loser = b if "agent-0" in a.held() else a
        assert await loser.acquire("agent-0", 2) is None


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
                assert await b.acquire("alpha", 1) is None
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
            last_refused = time.monotonic()

            async def taken() -> HeldLease | None:
                nonlocal last_refused
                held = await b.acquire("alpha", 1)
                if held is None:
                    last_refused = time.monotonic()
                return held

            lease = await until(taken, 3 * TTL, "node-b takes the expired lease", 0.01)
            acquired = time.monotonic()
        finally:
            renewer.cancel()
    assert lease.epoch == 1
    assert [(agent, reason) for agent, reason, _ in hooks.lost] == [("alpha", "unrenewed")]
    lost_at = hooks.lost[0][2]
    assert hooks.fences[-1] == ("alpha", 0.0)
    # the order: a's valid_until, a's loss, then the server's expiry (after b's last refusal)
    assert until_before <= lost_at < last_refused < acquired
    assert acquired - last_renew_sent <= TTL + 1.0  # expired within the TTL (+ polling)
    print(
        f"{size} server(s): valid_until → server expiry ≥ {last_refused - until_before:.3f} s "
        f"(margin {a.margin:.2f} s); expiry {acquired - last_renew_sent:.3f} s after the "
        f"last renew was sent (ttl {TTL} s)"
    )


async def test_release_then_another_node_acquires_at_once(one_server):
    servers = one_server
    mesh = mesh_section(servers.urls, lease_ttl_secs=TTL)
    hooks = Hooks()
    async with jetstream(mesh, "node-a") as js_a, jetstream(mesh, "node-b") as js_b:
        a, b = book("node-a", mesh, hooks), book("node-b", mesh)
        await a.attach(js_a)
        await b.attach(js_b)
        assert await a.acquire("alpha", 0) is not None
        assert await b.acquire("alpha", 1) is None
        assert await a.release("alpha") is True
        assert hooks.fences[-1] == ("alpha", 0.0) and "alpha" not in a.held()
        assert await a.holder("alpha") is None
        lease = await b.acquire("alpha", 1)  # over the delete marker
        assert lease is not None
        view = await a.holder("alpha")
        assert view is not None and (view.holder, view.epoch) == ("node-b", 1)
        assert await a.release("alpha") is False  # not a's to release


async def test_a_lease_written_by_someone_else_is_lost_at_the_next_renew(one_server):
    """Another writer (a member that does not play by the rules) overwrote the key: the
    compare-and-set fails, and the lease is dropped and fenced at once, not at valid_until."""
    servers = one_server
    mesh = mesh_section(servers.urls, lease_ttl_secs=TTL)
    hooks = Hooks()
    async with jetstream(mesh, "node-a") as js_a, jetstream(mesh, "node-x") as js_x:
        a = book("node-a", mesh, hooks)
        await a.attach(js_a)
        assert await a.acquire("alpha", 0) is not None
        junk = b'{"holder": "node-x"'
        await js_x.publish(kv_subject(bucket_name("default", Bucket.LEASES), token("alpha")), junk)
        assert await a.renew("alpha") is False
        assert [(agent, reason) for agent, reason, _ in hooks.lost] == [("alpha", "taken")]
        assert hooks.fences[-1] == ("alpha", 0.0)
        view = await a.holder("alpha")  # junk is shown as no holder, yet holds the key
        assert view is not None and (view.holder, view.epoch) == ("", -1)
        assert await a.acquire("alpha", 1) is None


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
            await a.holder("alpha")


def test_lease_records_are_small_json():
    from node.placement.leases import LeaseRecord

    record = msgspec.json.decode(
        msgspec.json.encode(LeaseRecord("node-a", 3, 1.5)), type=LeaseRecord
    )
    assert (record.holder, record.epoch) == ("node-a", 3)


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
            assert await b.acquire("alpha", 1) is None
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
        a.call_timeout = 1e-9  # the request goes out; its answer is not waited for
        assert await a.renew("alpha") is False
        a.call_timeout = 1.0
        assert len(a.held()["alpha"].unsure) == 1
        await until(lambda: _revision(a, "alpha", first + 1), 5, "the unanswered renew written")
        assert await a.renew("alpha") is True  # refused by revision, then recognised
        assert a.held()["alpha"].revision == first + 1 and hooks.lost == []
        assert await a.renew("alpha") is True
        assert a.held()["alpha"].revision == first + 2


async def _revision(book_: LeaseBook, agent: str, revision: int) -> bool:
    view = await book_.holder(agent)
    return view is not None and view.revision == revision
