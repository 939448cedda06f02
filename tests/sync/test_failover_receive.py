"""Who may write a journal after it moved (docs/mesh.md, "Placement and failover"): handoffs,
takeovers, a fork between epochs, each through a real push to one in-process node with real
signatures (node-a under test; node-b and node-c in the agent's placement set, node-d a pinned
peer outside it). node-a is on a real nats-server (its own mesh name per test): a takeover is
judged against the mesh's leases bucket and stream (node/placement/judge.py), which the tests
write as node-b would."""

from __future__ import annotations

import base64
import itertools
import json
import signal
import time

import msgspec
import nats
import pytest
from nacl.signing import SigningKey
from nats.js.errors import NotFoundError

from eventstore.envelope import Event, digest_of, encode_event, sign, utc_now
from eventstore.keys import public_key_multibase
from eventstore.store import Fenced
from node.context import CONTEXT
from node.ops import checkpoint
from node.placement.catchup import stream_holds
from node.placement.key import PLACEMENT
from node.placement.leases import LeaseRecord, lease_key, sign_record
from node.sync.nats.subjects import (
    MSG_ID_HEADER,
    Bucket,
    bucket_name,
    durable_name,
    lease_subject,
    msg_id,
    stream_name,
    subject,
)
from node.sync.rules import judging
from node.sync.service import SYNC
from projections import catalogue as c
from projections.journals import Journals
from tests.nats_support import NatsServer, nats_mesh_toml
from tests.polling import until
from tests.support import READ_TOKEN, auth, free_port, make_config
from tests.sync_support import SYNC_TUNING, peer_token, peer_toml

KEYS = {
    name: SigningKey(bytes([n]) * 32) for n, name in enumerate(("node-b", "node-c", "node-d"), 2)
}
B_TOKEN = peer_token("node-b", "node-a")
LIMITS = c.AgentLimits(tick_interval_ms=1, fuel_per_tick=1, memory_limit_mb=1, tick_timeout_ms=1)
DEFINITION = c.AgentDefinition(component="registry:x@1", sha256="", limits=LIMITS)


MESHES = itertools.count()


@pytest.fixture(scope="module")
def nats_server(tmp_path_factory):
    server = NatsServer(tmp_path_factory.mktemp("nats"), "n0").start()
    yield server
    server.kill()


@pytest.fixture
def mesh_name():
    return f"recv{next(MESHES)}"


@pytest.fixture
def config(tmp_path, nats_server, mesh_name):
    mesh = nats_mesh_toml([nats_server.url]) + f'name = "{mesh_name}"\n'
    peers = "".join(
        peer_toml(
            name,
            f"http://127.0.0.1:{free_port()}",
            accepts=peer_token(name, "node-a"),
            presents="unused-token-0000000000",
            public_key=public_key_multibase(key.verify_key),
        )
        for name, key in KEYS.items()
    )
    return make_config(tmp_path, SYNC_TUNING + mesh + peers)


@pytest.fixture
async def client(aiohttp_client, config):
    """node-a, once its placement layer is linked to the mesh (its judge can look)."""
    from node.app import build_app

    test_client = await aiohttp_client(build_app(config))
    manager = test_client.server.app[PLACEMENT]
    await until(lambda: manager.link is not None, 20, "the placement layer linked")
    return test_client


class MeshAsNodeB:
    """What node-b puts in the mesh's buckets and stream (the test holds no NATS user: the
    server has no permissions here)."""

    def __init__(self, url: str, mesh: str) -> None:
        self.url, self.mesh = url, mesh

    async def lease(
        self, agent: str, epoch: int | None, node: str = "node-b", key: SigningKey | None = None
    ) -> None:
        """`node`'s signed lease write of `agent` at `epoch` as its LeaseBook makes it: in
        the stream's lease log, then the bucket (None: the bucket's record deleted)."""
        nc = await nats.connect(self.url)
        try:
            kv = await nc.jetstream().key_value(bucket_name(self.mesh, Bucket.LEASES))
            if epoch is None:
                await kv.delete(lease_key(agent, node))
            else:
                value = sign_record(key or KEYS[node], LeaseRecord(agent, node, epoch, 0.0))
                await self.log(agent, node, epoch, key)
                await kv.put(lease_key(agent, node), value)
        finally:
            await nc.close()

    async def log(self, agent: str, node: str, epoch: int, key: SigningKey | None = None) -> int:
        """`node`'s signed lease record of `agent` in the stream's lease log: its position."""
        value = sign_record(key or KEYS[node], LeaseRecord(agent, node, epoch, 0.0))
        nc = await nats.connect(self.url)
        try:
            ack = await nc.jetstream().publish(lease_subject(self.mesh, node, agent), value)
            return int(ack.seq)
        finally:
            await nc.close()

    async def put(self, node: str, envelopes: list[dict]) -> None:
        """`node`'s envelopes in the stream, on its own subject (one message)."""
        nc = await nats.connect(self.url)
        try:
            agent = envelopes[0]["agent"]
            await nc.jetstream().publish(
                subject(self.mesh, node, agent), json.dumps(envelopes).encode()
            )
        finally:
            await nc.close()

    async def taken(
        self, chain: Chain, seq: int, origin: str, epoch: int, previous: str = "node-b"
    ) -> dict:
        """A takeover as an honest taker writes it: its lease record in the log, then the
        takeover naming that position, in the stream on its subject."""
        position = await self.log(chain.stream, origin, epoch)
        envelope = chain.add(seq, origin, takeover(epoch, previous, position))
        await self.put(origin, [envelope])
        return envelope

    async def published(
        self, envelopes: list[dict], *, data: bytes | None = None, last: int | None = None
    ) -> None:
        """node-b's envelopes in the stream, as its publisher puts them (one message); `data`
        and `last`: other bytes, another last seq in its message id (a member's lie)."""
        nc = await nats.connect(self.url)
        try:
            agent, first = envelopes[0]["agent"], envelopes[0]["seq"]
            await nc.jetstream().publish(
                subject(self.mesh, "node-b", agent),
                json.dumps(envelopes).encode() if data is None else data,
                headers={
                    MSG_ID_HEADER: msg_id("node-b", agent, first, last or envelopes[-1]["seq"])
                },
            )
        finally:
            await nc.close()


@pytest.fixture
async def mesh(client, nats_server, mesh_name) -> MeshAsNodeB:
    """The mesh as the tests write it, node-a's own consumer paused: what the tests put in the
    stream is what node-a's judge reads; what node-a receives is what the tests push."""
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()

        async def paused() -> bool:
            try:
                await js.pause_consumer(
                    stream_name(mesh_name), durable_name("node-a"), "2100-01-01T00:00:00Z"
                )
            except NotFoundError:
                return False
            return True

        await until(paused, 20, "node-a's consumer paused")
    finally:
        await nc.close()
    return MeshAsNodeB(nats_server.url, mesh_name)


class Chain:
    """One journal's envelopes as pushed, each signed by whichever node the test says."""

    def __init__(self, stream: str) -> None:
        self.stream = stream
        self.digests: dict[int, str] = {0: ""}

    def add(self, seq: int, origin: str, payload: c.Payload | None = None, **finding) -> dict:
        kind, data = c.event_of(payload) if payload is not None else ("finding", finding)
        event = Event(type=kind, ts=utc_now(), origin=origin, prev=self.digests[seq - 1], data=data)
        raw = encode_event(event)
        digest = digest_of(raw)
        self.digests[seq] = "sha256:" + digest.hex()
        return {
            "seq": seq,
            "agent": self.stream,
            "payload": base64.b64encode(raw).decode(),
            "signature": "ed25519:"
            + base64.b64encode(sign(KEYS[origin], self.stream, seq, digest)).decode(),
        }


def placed(*nodes: str) -> c.AgentPlaced:
    return c.AgentPlaced(placement=list(nodes), definition=DEFINITION)


def takeover(epoch: int, previous: str = "node-b", position: int = 0) -> c.JournalTakeover:
    return c.JournalTakeover(
        epoch=epoch, lease_revision=7, previous_home=previous, lease_position=position
    )


async def push(client, envelopes):
    response = await client.post(
        "/api/v1/sync/envelopes",
        json={"peer_id": "node-b", "envelopes": envelopes},
        headers=auth(B_TOKEN),
    )
    assert response.status == 200
    return await response.json()


def reasons(body) -> list[str]:
    return [r["reason"] for r in body["rejections"]]


async def findings(client, severity: str) -> list[dict]:
    body = await (await client.get("/api/v1/findings", headers=auth(READ_TOKEN))).json()
    return [f for f in body["findings"] if f["severity"] == severity]


def journals(client) -> Journals:
    return client.server.app[CONTEXT].projections.get(Journals)


def placed_journal(*nodes: str) -> tuple[Chain, list[dict]]:
    """`mover`, written by node-b: placed on `nodes`, then two findings."""
    chain = Chain("mover")
    first = [chain.add(1, "node-b", placed(*nodes))]
    first += [chain.add(seq, "node-b", title=f"b #{seq}") for seq in (2, 3)]
    return chain, first


async def test_a_handoff_moves_the_writer_to_the_node_it_names(client):
    chain, first = placed_journal("node-b", "node-c")
    handoff = chain.add(4, "node-b", c.JournalHandoff(to="node-c", epoch=1))
    by_c = chain.add(5, "node-c", title="c #5")
    body = await push(client, [*first, handoff, by_c])  # one batch: the handoff counts at once
    assert (body["accepted"], body["rejected"]) == (5, 0), body
    j = journals(client)
    assert (j.home_of("mover"), j.epoch_of("mover")) == ("node-c", 1)
    assert j.placement_of("mover") == ("node-b", "node-c")
    assert [m["to"] for m in j.moves_of("mover")] == ["node-c"]
    # the next batch: the new home writes on, the old one no longer may
    body = await push(client, [chain.add(6, "node-c", title="c #6")])
    assert body["accepted"] == 1
    late = Chain("mover")
    late.digests[6] = chain.digests[6]
    body = await push(client, [late.add(7, "node-b", title="b #7")])
    assert reasons(body) == ["foreign_writer"]
    # a copy of an envelope of the old epoch is a duplicate, not a foreign writer
    assert reasons(await push(client, [first[1], handoff])) == ["duplicate", "duplicate"]


async def test_a_handoff_to_an_outsider_or_not_raising_the_epoch_is_refused(client):
    chain, first = placed_journal("node-b", "node-c")
    assert (await push(client, first))["accepted"] == 3
    outside = chain.add(4, "node-b", c.JournalHandoff(to="node-d", epoch=1))
    stale = Chain("mover")
    stale.digests = dict(chain.digests)
    same_epoch = stale.add(4, "node-b", c.JournalHandoff(to="node-c", epoch=0))
    body = await push(client, [outside])
    assert reasons(body) == ["bad_handoff"] and "placement" in body["rejections"][0]["detail"]
    assert reasons(await push(client, [same_epoch])) == ["bad_handoff"]
    assert journals(client).home_of("mover") == "node-b"
    (reported,) = await findings(client, "high")  # once per journal and signer
    assert reported["title"] == "refused handoff of journal mover by node node-b"


async def test_a_takeover_from_the_placement_set_with_a_higher_epoch_is_accepted(client, mesh):
    chain, first = placed_journal("node-b", "node-c")
    assert (await push(client, first))["accepted"] == 3
    taken = await mesh.taken(chain, 4, "node-c", 1)
    body = await push(client, [taken, chain.add(5, "node-c", title="c")])
    assert (body["accepted"], body["rejected"]) == (2, 0)
    j = journals(client)
    assert (j.home_of("mover"), j.epoch_of("mover")) == ("node-c", 1)
    assert j.moves_of("mover")[0]["reason"] == "takeover"
    # the old home's envelopes of the old epoch that come after it are refused, not stored
    old = Chain("mover")
    old.digests[5] = chain.digests[5]
    assert reasons(await push(client, [old.add(6, "node-b", title="b late")])) == ["foreign_writer"]
    assert client.server.app[CONTEXT].store.head("mover").seq == 5


async def test_a_takeover_by_a_node_outside_the_placement_set_is_refused_and_reported_once(client):
    chain, first = placed_journal("node-b", "node-c")
    assert (await push(client, first))["accepted"] == 3
    outsider = chain.add(4, "node-d", takeover(1))
    for _ in range(2):
        body = await push(client, [outsider])
        assert reasons(body) == ["bad_takeover"]
        assert "node-d" in body["rejections"][0]["detail"]
    assert journals(client).home_of("mover") == "node-b"
    assert client.server.app[CONTEXT].store.head("mover").seq == 3
    reported = await findings(client, "high")
    assert len(reported) == 1
    assert "node-d" in reported[0]["title"] and reported[0]["agent"] == "node-a"


async def test_a_takeover_that_skips_epochs_is_refused(client):
    """Epochs go up by one: a takeover at 2**53 would leave no epoch for the next one."""
    chain, first = placed_journal("node-b", "node-c")
    assert (await push(client, first))["accepted"] == 3
    body = await push(client, [chain.add(4, "node-c", takeover(2**53))])
    assert reasons(body) == ["bad_takeover"]
    assert f"epoch {2**53} is not 1" in body["rejections"][0]["detail"]
    assert journals(client).epoch_of("mover") == 0


async def test_a_takeover_while_the_home_holds_a_live_lease_is_refused_and_reported(client, mesh):
    """A member of the set cannot take over an agent whose home is alive: node-b's signed lease
    record is in the stream's lease log within a TTL before node-c's. Once the bucket's record
    is gone too (node-b died), the same takeover is still refused: the verdict is the stream's
    prefix before node-c's record, the same for every node whenever it reads (issue 51, the
    second case the model found)."""
    chain, first = placed_journal("node-b", "node-c")
    assert (await push(client, first))["accepted"] == 3
    await mesh.lease("mover", 0)
    forged = await mesh.taken(chain, 4, "node-c", 1)
    body = await push(client, [forged])
    assert reasons(body) == ["bad_takeover"]
    assert (
        "its home 'node-b' held a live lease at stream position"
        in (body["rejections"][0]["detail"])
    )
    (reported,) = await findings(client, "high")
    assert reported["title"] == "refused takeover of journal mover by node node-c"
    assert journals(client).home_of("mover") == "node-b"
    await mesh.lease("mover", None)  # node-b died: its record in the bucket is gone
    assert reasons(await push(client, [forged])) == ["bad_takeover"]
    assert journals(client).home_of("mover") == "node-b"


async def test_two_takeovers_in_one_push_against_a_live_home_are_both_refused(client, mesh):
    """Issue 51, defect 1: two takeovers at one seq and epoch (differing in their lease
    revision) and node-c's envelope after the second, in one push, while node-b holds its
    lease. The first is judged and refused, the second is an equivocation (refused unjudged),
    one critical finding carries both; nothing of node-c's is stored."""
    chain, first = placed_journal("node-b", "node-c")
    assert (await push(client, first))["accepted"] == 3
    await mesh.lease("mover", 0)
    one = chain.add(
        4, "node-c", c.JournalTakeover(epoch=1, lease_revision=1, previous_home="node-b")
    )
    two = chain.add(
        4, "node-c", c.JournalTakeover(epoch=1, lease_revision=2, previous_home="node-b")
    )
    after = chain.add(5, "node-c", c.AgentRetired(reason="node-c says so"))
    body = await push(client, [one, two, after])
    assert body["accepted"] == 0, body
    assert reasons(body)[:2] == ["bad_takeover", "equivocation"], body
    (critical,) = await findings(client, "critical")
    assert critical["title"].startswith("equivocation of moves in journal mover at seq 4")
    both = json.loads(critical["detail"])
    assert [both["first"]["signature"], both["second"]["signature"]] == [
        one["signature"],
        two["signature"],
    ]
    assert journals(client).home_of("mover") == "node-b"
    assert client.server.app[CONTEXT].store.head("mover").seq == 3
    again = await push(client, [two])  # alone, later: still an equivocation
    assert reasons(again) == ["equivocation"]


async def test_a_deep_takeover_erasing_what_the_stream_holds_is_refused(client, mesh):
    """node-c, a member of the set, signs a takeover at seq 2: it would rewind seqs 2-5 that
    node-b published to the stream (acknowledged). Refused, reported naming node-c, nothing
    removed."""
    chain, first = placed_journal("node-b", "node-c")
    tail = [chain.add(seq, "node-b", title=f"b #{seq}") for seq in (4, 5)]
    assert (await push(client, first + tail))["accepted"] == 5
    await mesh.published(first + tail)
    ctx = client.server.app[CONTEXT]
    deep = Chain("mover")
    deep.digests[1] = chain.digests[1]
    body = await push(client, [await mesh.taken(deep, 2, "node-c", 1)])
    assert reasons(body) == ["bad_takeover"]
    detail = body["rejections"][0]["detail"]
    assert "the stream holds seq 2 of it from 'node-b' before its taker's lease record" in detail
    assert [e.seq for e in ctx.store.read_stream("mover")] == [1, 2, 3, 4, 5]
    assert ctx.store.rewound_at() == 0
    assert await findings(client, "critical") == []
    high = await findings(client, "high")
    title = "refused takeover of journal mover by node node-c"
    assert [f["title"] for f in high if f["title"] == title] == [title], high


async def test_a_takeover_that_does_not_raise_the_epoch_is_refused(client, mesh):
    chain, first = placed_journal("node-b", "node-c")
    first.append(await mesh.taken(chain, 4, "node-c", 1))
    assert (await push(client, first))["accepted"] == 4
    again = chain.add(5, "node-b", takeover(1, previous="node-c"))
    body = await push(client, [again])
    assert reasons(body) == ["bad_takeover"]
    assert "does not raise" in body["rejections"][0]["detail"]
    assert journals(client).home_of("mover") == "node-c"
    assert len(await findings(client, "high")) == 1


async def test_a_fork_between_epochs_resolves_to_the_higher_one(client, mesh):
    """node-b wrote seqs 4 and 5 that never reached node-c; node-c took over at seq 4."""
    chain, first = placed_journal("node-b", "node-c")
    tail = [chain.add(seq, "node-b", title=f"b #{seq}") for seq in (4, 5)]
    assert (await push(client, first + tail))["accepted"] == 5
    titles = {f["title"] for f in await findings(client, "info")}
    assert {"b #4", "b #5"} <= titles
    ctx = client.server.app[CONTEXT]
    removed_first = ctx.store.get("mover", 4)
    checkpoint.save(ctx.projections, ctx.config.data_path)
    assert checkpoint.restore(ctx.projections.fresh(), ctx.store, ctx.config.data_path)
    winner = Chain("mover")
    winner.digests[3] = chain.digests[3]
    body = await push(client, [await mesh.taken(winner, 4, "node-c", 1), *tail])
    assert body["accepted"] == 1
    assert reasons(body) == ["foreign_writer", "foreign_writer"]  # the old tail, again
    assert ctx.store.head("mover").seq == 4
    assert ctx.store.get("mover", 4).event.type == c.JOURNAL_TAKEOVER
    assert [e.seq for e in ctx.store.read_stream("mover")] == [1, 2, 3, 4]
    j = journals(client)
    assert (j.home_of("mover"), j.epoch_of("mover"), j.head["mover"]) == ("node-c", 1, 4)
    # the read models no longer show what was removed (on disk: refolded in the rewind)
    titles = {f["title"] for f in await findings(client, "info")}
    assert "b #3" in titles and not {"b #4", "b #5"} & titles
    # a checkpoint of the in-memory read models from before the rewind no longer loads
    assert ctx.store.rewound_at() > removed_first.position
    assert not checkpoint.restore(ctx.projections.fresh(), ctx.store, ctx.config.data_path)
    # one critical finding, in this node's journal, carrying both envelopes
    (critical,) = await findings(client, "critical")
    assert critical["agent"] == "node-a" and "mover at seq 4" in critical["title"]
    detail = json.loads(critical["detail"])
    assert detail["removed_seqs"] == "4..5"
    assert detail["removed_first"] == removed_first.as_pushed()
    assert detail["takeover"] == ctx.store.get("mover", 4).as_pushed()
    # node-c writes on from there
    assert (await push(client, [winner.add(5, "node-c", title="c #5")]))["accepted"] == 1
    assert ctx.projections.get(Journals).head["mover"] == 5


async def test_a_takeover_moves_a_journal_homed_here_away_and_blocks_its_writes(client, mesh):
    ctx = client.server.app[CONTEXT]
    kind, data = c.event_of(placed("node-a", "node-b"))
    await ctx.store.append("local", kind, data)
    ours = await ctx.store.append("local", "log", {"level": "info", "message": "mine"})
    chain = Chain("local")
    chain.digests[2] = ours.payload_hash
    # own journal: an ordinary envelope of node-b is refused, its takeover is not
    assert reasons(await push(client, [chain.add(3, "node-b", title="x")])) == ["own_journal"]
    chain = Chain("local")
    chain.digests[2] = ours.payload_hash
    taken = await mesh.taken(chain, 3, "node-b", 1, "node-a")
    body = await push(client, [taken, chain.add(4, "node-b", title="b")])
    assert (body["accepted"], body["rejected"]) == (2, 0)
    assert journals(client).home_of("local") == "node-b"
    with pytest.raises(Fenced):
        await ctx.store.append("local", "log", {"level": "info", "message": "too late"})
    assert ctx.store.head("local").seq == 4


async def test_a_handoff_staged_before_it_is_committed_counts_for_the_next_staged_batch(client):
    """The NATS consumer stages a batch while the one before commits (Receiver.stage)."""
    receiver = client.server.app[SYNC].receiver
    chain, first = placed_journal("node-b", "node-c")
    first.append(chain.add(4, "node-b", c.JournalHandoff(to="node-c", epoch=1)))
    by_c = [chain.add(5, "node-c", title="c #5")]

    def raw(envelopes):
        return [msgspec.Raw(json.dumps(e).encode()) for e in envelopes]

    staged = await receiver.stage(raw(first))
    assert journals(client).home_of("mover") is None  # not folded yet
    staged_next = await receiver.stage(raw(by_c))  # screened before the handoff is folded
    outcomes = [await receiver.settle("node-b", s) for s in (staged, staged_next)]
    assert [(o.accepted, len(o.rejections)) for o in outcomes] == [(4, 0), (1, 0)]
    assert journals(client).home_of("mover") == "node-c"
    assert client.server.app[CONTEXT].store.head("mover").seq == 5


async def test_a_forged_or_unchained_takeover_at_a_held_seq_rewinds_nothing(client):
    chain, first = placed_journal("node-b", "node-c")
    tail = [chain.add(seq, "node-b", title=f"b #{seq}") for seq in (4, 5)]
    assert (await push(client, first + tail))["accepted"] == 5
    ctx = client.server.app[CONTEXT]
    held = [e.payload for e in ctx.store.read_stream("mover")]
    forged_chain = Chain("mover")
    forged_chain.digests[3] = chain.digests[3]
    forged = forged_chain.add(4, "node-c", takeover(1))
    forged["signature"] = "ed25519:" + base64.b64encode(bytes(64)).decode()  # not node-c's
    unchained = Chain("mover")
    unchained.digests[3] = "sha256:" + "0" * 64  # prev is not our seq 3
    assert reasons(await push(client, [forged])) == ["bad_signature"]
    body = await push(client, [unchained.add(4, "node-c", takeover(1))])
    assert reasons(body) == ["bad_takeover"] and "seq 3" in body["rejections"][0]["detail"]
    assert [e.payload for e in ctx.store.read_stream("mover")] == held
    assert ctx.store.rewound_at() == 0
    assert await findings(client, "critical") == []
    assert journals(client).home_of("mover") == "node-b"


async def test_a_takeover_forking_a_journal_homed_here_rewinds_this_nodes_tail(client, mesh):
    """This node was the home, wrote seq 3 that never reached node-b nor the stream (its last
    write: the publisher publishes nothing of a fenced journal), and lost the lease."""
    ctx = client.server.app[CONTEXT]
    kind, data = c.event_of(placed("node-a", "node-b"))
    await ctx.store.append("local", kind, data)
    second = await ctx.store.append("local", "log", {"level": "info", "message": "2"})
    await ctx.store.append_sealing("local", "log", {"level": "info", "message": "3, unpublished"})
    chain = Chain("local")
    chain.digests[2] = second.payload_hash
    body = await push(client, [await mesh.taken(chain, 3, "node-b", 1, "node-a")])
    assert (body["accepted"], body["rejected"]) == (1, 0)
    assert [e.event.origin for e in ctx.store.read_stream("local")] == ["node-a"] * 2 + ["node-b"]
    assert journals(client).home_of("local") == "node-b"
    (critical,) = await findings(client, "critical")
    assert json.loads(critical["detail"])["removed_seqs"] == "3..3"
    with pytest.raises(Fenced):
        await ctx.store.append("local", "log", {"level": "info", "message": "4"})


def branch(chain: Chain, seq: int) -> Chain:
    """Another chain of the same journal, sharing `chain`'s envelopes up to `seq`."""
    other = Chain(chain.stream)
    other.digests = {n: d for n, d in chain.digests.items() if n <= seq}
    return other


def forged(envelope: dict) -> dict:
    """The envelope with a signature its origin never made."""
    return envelope | {"signature": "ed25519:" + base64.b64encode(bytes(64)).decode()}


async def test_a_forged_move_names_nobody_and_holds_up_no_journal(client, mesh):
    """A member cannot frame a node of the set: a takeover or handoff naming it as signer but
    not signed by it is refused as a bad signature before it is judged, with no finding; and
    one that could not be judged marks nothing, so the home's envelopes go on."""
    chain, first = placed_journal("node-b", "node-c")
    assert (await push(client, first))["accepted"] == 3
    await mesh.lease("mover", 0)  # node-b is alive: a real takeover would be reported
    moves = [
        forged(chain.add(4, "node-c", takeover(1))),
        forged(chain.add(4, "node-d", takeover(1))),  # an outsider
        forged(branch(chain, 3).add(4, "node-b", c.JournalHandoff(to="node-c", epoch=1))),
    ]
    for move in moves:
        assert reasons(await push(client, [move])) == ["bad_signature"]
    receiver = client.server.app[SYNC].receiver
    receiver.judge = None  # placement not running: nothing can be judged
    assert reasons(await push(client, [moves[0]])) == ["bad_signature"]
    assert await findings(client, "high") == []
    # a signed takeover that cannot be judged is a gap for now; the home's own seq 4 then
    # settles it, and what follows is no gap
    body = await push(client, [branch(chain, 3).add(4, "node-c", takeover(1))])
    assert reasons(body) == ["gap"]
    fresh = branch(chain, 3)
    body = await push(
        client, [fresh.add(4, "node-b", title="b #4"), fresh.add(5, "node-b", title="b #5")]
    )
    assert (body["accepted"], body["rejected"]) == (2, 0), body
    assert journals(client).home_of("mover") == "node-b"


async def test_what_the_stream_holds_is_what_its_signed_envelopes_say(client, mesh):
    """A member's message id (or junk) on the stream claims no history: a takeover after the
    home's lease is gone is judged by the seqs of the envelopes the home signed."""
    chain, first = placed_journal("node-b", "node-c")
    assert (await push(client, first))["accepted"] == 3
    await mesh.published(first, last=999_999_999)  # node-b's envelopes, its id lying
    lookup = client.server.app[SYNC].keys.lookup
    nc = await nats.connect(mesh.url)
    try:
        js = nc.jetstream()
        assert await stream_holds(js, mesh.mesh, "mover", ["node-b"], lookup) == 3
        await mesh.published(first, data=b"junk", last=888_888_888)
        assert await stream_holds(js, mesh.mesh, "mover", ["node-b"], lookup) == 0
        by_c = [Chain("mover").add(1, "node-c", placed("node-b", "node-c"))]
        await mesh.published(by_c)  # node-c's envelope on node-b's subject
        assert await stream_holds(js, mesh.mesh, "mover", ["node-b"], lookup) == 0
    finally:
        await nc.close()
    body = await push(client, [await mesh.taken(chain, 4, "node-c", 1)])
    assert (body["accepted"], body["rejected"]) == (1, 0), body
    assert journals(client).home_of("mover") == "node-c"


async def test_the_home_judges_a_takeover_of_its_journal_by_its_record_in_the_log(client, mesh):
    """node-a is the home of `local` and its signed record is in the stream's lease log just
    before the taker's, though this process holds no lease (it restarted within a TTL): it
    refuses the takeover, as every other node does by the same log, and writes the takeover's
    seq itself, a finding (a report: no verdict depends on it)."""
    ctx = client.server.app[CONTEXT]
    kind, data = c.event_of(placed("node-a", "node-b"))
    await ctx.store.append("local", kind, data)
    ours = await ctx.store.append("local", "log", {"level": "info", "message": "mine"})
    await mesh.lease("local", 0, node="node-a", key=ctx.key)
    chain = Chain("local")
    chain.digests[2] = ours.payload_hash
    body = await push(client, [await mesh.taken(chain, 3, "node-b", 1, "node-a")])
    assert reasons(body) == ["bad_takeover"], body
    assert (
        "its home 'node-a' held a live lease at stream position"
        in (body["rejections"][0]["detail"])
    )
    assert journals(client).home_of("local") == "node-a"
    refutation = ctx.store.get("local", 3)
    assert refutation is not None and refutation.event.origin == "node-a"
    assert refutation.event.type == "finding"
    assert refutation.event.data["title"] == "refused takeover of journal local by node node-b"


async def test_a_batch_of_takeovers_is_judged_within_one_deadline(
    client, nats_server, mesh, monkeypatch
):
    """The mesh does not answer (its server is stopped): a batch of takeovers of several
    journals waits one deadline in all, not one per takeover; each is a gap for now."""
    chains = {}
    for name in ("j1", "j2", "j3"):
        chain = chains[name] = Chain(name)
        assert (await push(client, [chain.add(1, "node-b", placed("node-b", "node-c"))]))[
            "accepted"
        ] == 1
    monkeypatch.setattr(judging, "BATCH_JUDGE_SECS", 0.5)
    batch = [await mesh.taken(chain, 2, "node-c", 1) for chain in chains.values()]
    nats_server.proc.send_signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        body = await push(client, batch)
        took = time.monotonic() - started
    finally:
        nats_server.proc.send_signal(signal.SIGCONT)
    assert reasons(body) == ["gap"] * 3, body
    assert "did not answer in time" in body["rejections"][0]["detail"]
    assert took < 3.0, took  # one deadline, not one judge's 5 s per takeover
