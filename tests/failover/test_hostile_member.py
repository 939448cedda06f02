"""A hostile member against placement (issue 43): three honest node processes and node-x, each
on its own NATS user of the generated permissions on one real nats-server (lease TTL 4 s).
node-x runs a real node too (its operator consents to host nothing), and the test also plays
node-x raw: its NATS user and its pinned node key, publishing what a member may publish.

The honest counter is placed on node-a, node-b, node-c and node-x; node-a deploys it. The
tests run in order on one mesh (module scope): forged takeovers while the home runs, a deep
takeover, lease records before a deploy, forged component metas, lease attacks for LEASE_ATTACK
seconds under findings load and a real failover through them, then node-x's own placements
that name honest nodes without their consent (and one that asks for more than consent allows);
then, node-x's node dead (issue 51): node-x's own `billing`, a name node-b consents to host as
node-a's only, and a drain-style move of node-a's agent to node-x whose new definition, signed
by node-x as its home, every honest node refuses and reports.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import signal
import threading
import time

import nats
import pytest
from aiohttp import web

from eventstore.envelope import digest_of
from harness.failover import (
    AGENT,
    LEASE_TTL_SECS,
    FailoverMesh,
    FindingLoad,
    agent_view,
    deploy,
    events,
    move_to,
    publish_component,
    same_journals,
    ticks,
    wait_for,
    wait_runner,
)
from harness.hostile import LEASES, ClaimFlood, FalseAdvert, HostileMember, LeaseAttack
from harness.nats import NatsServer, nats_mesh_toml
from harness.node import NodeProcess, write_config
from node.placement.leases import LeaseRecord, lease_key, sign_record
from node.runtime.compiled_cache import COMPILED_CACHE_ENV
from node.sync.nats.subjects import (
    kv_stream,
    kv_subject,
)
from tests.runtime_support import COMPILED_CACHE

pytestmark = pytest.mark.timeout(180)
HONEST = ("node-a", "node-b", "node-c")
X = "node-x"
SET = ["node-a", "node-b", "node-c", X]
LEASE_ATTACK_SECS = 15  # 30 and more in bench/failover.py --hostile


class SpendCounter:
    """The `[actions.spend]` endpoint of every node: when each POST came."""

    def __init__(self) -> None:
        self.calls: list[float] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()
        assert self._ready.wait(10)

    def _run(self) -> None:
        async def spend(_request: web.Request) -> web.Response:
            self.calls.append(time.monotonic())
            return web.json_response({"ok": True})

        async def serve() -> None:
            app = web.Application()
            app.router.add_post("/spend", spend)
            runner = web.AppRunner(app)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            self._ready.set()

        self._loop.run_until_complete(serve())
        self._loop.run_forever()


def head_of(node: NodeProcess, journal: str) -> tuple[int, str]:
    """(seq, payload hash) of the node's copy's last envelope."""
    page: list[dict] = []
    with node.client() as client:
        while True:
            got = client.get(
                "/api/v1/sync/envelopes/pushed",
                params={"agent": journal, "since": len(page), "limit": 1000},
            ).json()["envelopes"]
            page += got
            if len(got) < 1000:
                break
    last = page[-1]
    return last["seq"], "sha256:" + digest_of(base64.b64decode(last["payload"])).hex()


def hash_at(node: NodeProcess, journal: str, seq: int) -> str:
    with node.client() as client:
        got = client.get(
            "/api/v1/sync/envelopes/pushed", params={"agent": journal, "since": seq - 1, "limit": 1}
        ).json()["envelopes"]
    return "sha256:" + digest_of(base64.b64decode(got[0]["payload"])).hex()


def findings_titled(node: NodeProcess, words: str) -> list[dict]:
    with node.client() as client:
        found = client.get("/api/v1/findings", params={"since": 0, "limit": 1000}).json()
    return [f for f in found["findings"] if words in f["title"]]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory, built_agents):
    root = tmp_path_factory.mktemp("hostile")
    spend = SpendCounter()
    monkey = pytest.MonkeyPatch()
    monkey.setenv(COMPILED_CACHE_ENV, str(COMPILED_CACHE))
    fm = FailoverMesh(
        root,
        (*HONEST, X),
        members=True,
        without_consent=(X,),
        extra_toml=f'\n[actions.spend]\nurl = "http://127.0.0.1:{spend.port}/spend"\n',
    ).start()
    member = HostileMember(fm.cluster.urls[0], root / "mesh" / X / "data")
    wait_for(member.has_components_bucket, 30, "the nodes made the components bucket")
    counter = built_agents["counter"].read_bytes()
    sha = hashlib.sha256(counter).hexdigest()
    member.forge_meta(sha)  # before the deploy: the home's put heals it
    component = publish_component(fm["node-a"], built_agents["counter"])
    deployed = deploy(fm["node-a"], component, SET)
    assert deployed.status_code == 201, deployed.text
    member.forge_meta(sha)  # after it: the others fetch from the sound meta behind it
    assert wait_runner(fm, 20) == "node-a"
    yield fm, member, spend
    fm.kill()
    monkey.undo()


def test_a_takeover_forged_while_the_home_runs_is_refused_everywhere(hostile):
    """node-x, a member of the set, signs a takeover at the head while node-a runs the
    agent: every node (node-a too) refuses it and reports node-x; node-a ticks on."""
    fm, member, _ = hostile
    wait_for(lambda: len(ticks(events(fm["node-b"]))) >= 3, 20, "b holds a few ticks")
    seq, prev = head_of(fm["node-b"], AGENT)
    epoch = agent_view(fm["node-b"])["placement"]["epoch"]
    forged = member.envelope(
        AGENT,
        seq + 1,
        prev,
        "journal.takeover",
        {"epoch": epoch + 1, "lease_revision": 1, "previous_home": "node-a"},
    )
    member.publish([forged])
    for name in HONEST:
        wait_for(
            lambda n=name: findings_titled(
                fm[n], f"refused takeover of journal {AGENT} by node {X}"
            ),
            20,
            f"{name} reports node-x's takeover",
        )
    before = len(ticks(events(fm["node-a"])))
    wait_for(lambda: len(ticks(events(fm["node-a"]))) >= before + 3, 20, "a ticks on")
    assert wait_runner(fm, 5) == "node-a"
    for name in HONEST:
        journal = events(fm[name])
        assert not [e for e in journal if e["origin"] == X]
        assert agent_view(fm[name])["placement"]["home"] == "node-a"


def test_a_deep_takeover_erases_nothing(hostile):
    """node-x signs a takeover at seq 2 (forking the whole history): every node refuses it
    (the stream holds node-a's envelopes from seq 2 on), reports node-x, rewinds nothing."""
    fm, member, _ = hostile
    before = {name: len(events(fm[name])) for name in HONEST}
    epoch = agent_view(fm["node-a"])["placement"]["epoch"]
    deep = member.envelope(
        AGENT,
        2,
        hash_at(fm["node-a"], AGENT, 1),
        "journal.takeover",
        {"epoch": epoch + 1, "lease_revision": 1, "previous_home": "node-a"},
    )
    member.publish([deep])
    time.sleep(1.0)  # the stream delivers it to every consumer within this
    for name in HONEST:
        journal = events(fm[name])
        assert len(journal) >= before[name], name
        assert [e["seq"] for e in journal] == list(range(1, len(journal) + 1))
        assert journal[1]["origin"] == "node-a"
        assert not findings_titled(fm[name], "equivocation")  # no fork was resolved
    assert wait_runner(fm, 5) == "node-a"


def _two_takeovers(member: HostileMember, seq: int, prev: str, epoch: int) -> list[dict]:
    """Two validly signed takeovers at one seq and epoch, differing in their lease revision
    (issue 51, defect 1: the second was accepted unjudged once the first was refused)."""
    return [
        member.envelope(
            AGENT,
            seq,
            prev,
            "journal.takeover",
            {"epoch": epoch + 1, "lease_revision": revision, "previous_home": "node-a"},
        )
        for revision in (1, 2)
    ]


def _after(member: HostileMember, first: dict, kind: str, data: dict) -> dict:
    """node-x's envelope right after `first` (as if its takeover had been accepted)."""
    prev = "sha256:" + digest_of(base64.b64decode(first["payload"])).hex()
    return member.envelope(AGENT, first["seq"] + 1, prev, kind, data)


def test_two_takeovers_in_one_message_against_a_live_home_are_both_refused(hostile):
    """One message holding two takeovers at the head (same seq and epoch) and an
    `agent.retired` after the second: every node refuses all three, reports the pair as an
    equivocation of moves (one finding with both envelopes) and node-a ticks on."""
    fm, member, _ = hostile
    seq, prev = head_of(fm["node-b"], AGENT)
    epoch = agent_view(fm["node-b"])["placement"]["epoch"]
    pair = _two_takeovers(member, seq + 1, prev, epoch)
    retired = _after(member, pair[1], "agent.retired", {"reason": "node-x says so"})
    member.publish([*pair, retired])
    for name in HONEST:
        wait_for(
            lambda n=name: findings_titled(fm[n], f"equivocation of moves in journal {AGENT}"),
            20,
            f"{name} reports node-x's pair of takeovers",
        )
        # each node's own finding, and the others' as replicated: every one names node-x and
        # carries both envelopes
        for finding in findings_titled(fm[name], f"equivocation of moves in journal {AGENT}"):
            assert X in finding["title"]
            assert pair[0]["signature"] in finding["detail"]
            assert pair[1]["signature"] in finding["detail"]
    before = len(ticks(events(fm["node-a"])))
    wait_for(lambda: len(ticks(events(fm["node-a"]))) >= before + 3, 20, "a ticks on")
    assert wait_runner(fm, 5) == "node-a"
    for name in HONEST:
        assert not [e for e in events(fm[name]) if e["origin"] == X], name
        assert agent_view(fm[name])["placement"]["home"] == "node-a"


def test_two_takeovers_at_seq_2_rewind_nothing_and_place_nothing(hostile):
    """The pair at seq 2 (forking the whole history), then an `agent.placed` naming node-x and
    node-a: nothing is rewound anywhere, the set stays the owner's, node-a runs the agent."""
    fm, member, _ = hostile
    before = {name: len(events(fm[name])) for name in HONEST}
    epoch = agent_view(fm["node-a"])["placement"]["epoch"]
    pair = _two_takeovers(member, 2, hash_at(fm["node-a"], AGENT, 1), epoch)
    placed = agent_view(fm["node-a"])["placement"]["placement"]
    rogue = _after(
        member,
        pair[1],
        "agent.placed",
        {"placement": [X, "node-a"], "definition": events(fm["node-a"])[0]["data"]["definition"]},
    )
    member.publish([*pair, rogue])
    for name in HONEST:
        wait_for(
            lambda n=name: len(
                findings_titled(fm[n], f"equivocation of moves in journal {AGENT} at seq 2")
            ),
            20,
            f"{name} reports node-x's pair at seq 2",
        )
    for name in HONEST:
        journal = events(fm[name])
        assert len(journal) >= before[name], name
        assert [e["seq"] for e in journal] == list(range(1, len(journal) + 1))
        assert journal[1]["origin"] == "node-a"
        assert agent_view(fm[name])["placement"]["placement"] == placed
    assert wait_runner(fm, 5) == "node-a"


def test_lease_records_written_before_a_deploy_do_not_block_it(hostile, built_agents):
    """node-x writes a signed lease of a new agent under its own key (all it may write) and
    tries node-a's key (refused by the server): node-a deploys the agent all the same."""
    fm, member, _ = hostile

    async def prewrite(nc: nats.NATS) -> None:
        mine = sign_record(member.key, LeaseRecord("fresh", X, 0, time.time()))
        await nc.publish(kv_subject(LEASES, lease_key("fresh", X)), mine)
        theirs = sign_record(member.key, LeaseRecord("fresh", "node-a", 0, time.time()))
        await nc.publish(kv_subject(LEASES, lease_key("fresh", "node-a")), theirs)
        await nc.flush(5)

    member.run(prewrite)
    component = publish_component(fm["node-a"], built_agents["counter"], package="fresh")
    deployed = deploy(fm["node-a"], component, ["node-a", "node-b"], agent="fresh")
    assert deployed.status_code == 201, deployed.text
    assert wait_runner(fm, 20, agent="fresh") == "node-a"


def test_lease_attacks_under_load_move_nothing_and_a_failover_still_happens(hostile):
    """For LEASE_ATTACK_SECS, every 0.5 s: deletes and junk on node-a's lease key (refused
    by the server), junk and a next-epoch claim under node-x's own key. Findings are posted
    to the home throughout. The agent stays on node-a, nothing acknowledged is lost; then
    node-a is killed with the attack going on, and node-b or node-c takes over."""
    fm, member, _ = hostile
    epoch = agent_view(fm["node-a"])["placement"]["epoch"]
    attack = LeaseAttack(member, AGENT, lambda: "node-a", lambda: epoch)
    with attack:
        with FindingLoad(fm) as load:
            deadline = time.monotonic() + LEASE_ATTACK_SECS
            while time.monotonic() < deadline:
                assert wait_runner(fm, 5, among=list(HONEST)) == "node-a"
                time.sleep(0.5)
        assert attack.rounds >= LEASE_ATTACK_SECS  # two a second
        assert len(load.acknowledged) > 20, load.acknowledged[-3:]
        journal = events(fm["node-a"])
        assert "journal.takeover" not in [e["type"] for e in journal]
        assert {o for _, o in ticks(journal)} == {"node-a"}
        titles = {e["data"].get("title") for e in journal if e["type"] == "finding"}
        assert not set(load.acknowledged) - titles  # nothing acknowledged lost

        killed = time.monotonic()
        fm["node-a"].kill()
        new_home = wait_runner(fm, 2 * LEASE_TTL_SECS + 10, among=["node-b", "node-c"])
        took = time.monotonic() - killed
        print(f"takeover by {new_home} {took:.1f} s after the kill, under the lease attack")

        def reported() -> list[dict]:  # what node-x wrote under its key, once read
            return [
                f
                for name in ("node-b", "node-c")
                for words in (f"junk under node {X}'s lease key", f"node {X} claimed agent")
                for f in findings_titled(fm[name], words)
            ]

        wait_for(reported, 20, "node-x's junk or stalled claim reported")
    fm["node-a"].start()
    journal = same_journals(fm, list(HONEST), timeout=60)
    kinds = [e for e in journal if e["type"] == "journal.takeover"]
    assert [e["origin"] for e in kinds] == [new_home]
    assert kinds[0]["data"]["epoch"] == epoch + 1  # no epoch skipped
    assert not set(load.acknowledged) - {
        e["data"].get("title") for e in journal if e["type"] == "finding"
    }


def test_a_members_placement_runs_nowhere_without_consent_and_never_with_more(
    hostile, built_agents
):
    """node-x's own node deploys `leech` (reads the payments secret) placed on node-x and
    node-b, and `payer` with `spend` ungated placed on node-x and node-b; raw, node-x places
    `raw-leech` on node-c. node-b consents to host the payer only, with `spend` gated; nobody
    consents to the leeches. node-x dies: node-b takes the payer over and asks for every
    `spend`, and no honest node ever runs a leech or reads its secret for it."""
    fm, member, spend = hostile
    reader = publish_component(fm[X], built_agents["secrets_reader"], package="leech")
    leech = deploy(fm[X], reader, [X, "node-b"], agent="leech", grant_domains=["payments"])
    assert leech.status_code == 201, leech.text
    payer = publish_component(fm[X], built_agents["payer"], package="payer")
    paying = deploy(
        fm[X], payer, [X, "node-b"], agent="payer", capabilities={"spend": True}, approval={}
    )
    assert paying.status_code == 201, paying.text
    wait_for(lambda: spend.calls, 20, "node-x's payer spends ungated there")

    sha = "sha256:" + hashlib.sha256(built_agents["secrets_reader"].read_bytes()).hexdigest()
    placed = member.envelope(
        "raw-leech",
        1,
        "",
        "agent.placed",
        {
            "placement": [X, "node-c"],
            "definition": {
                "component": "registry:leech@1.0.0",
                "sha256": sha,
                "capabilities": {"spend": True},
                "grant_domains": ["payments"],
                "limits": {
                    "tick_interval_ms": 200,
                    "fuel_per_tick": 10**9,
                    "memory_limit_mb": 64,
                    "tick_timeout_ms": 10_000,
                },
            },
            "epoch": 0,
        },
    )
    member.publish([placed])
    for name, agent in (("node-b", "leech"), ("node-b", "payer"), ("node-c", "raw-leech")):
        wait_for(lambda n=name, a=agent: agent_view(fm[n], a), 20, f"{name} holds {agent}")

    fm[X].kill()
    killed = time.monotonic()
    assert wait_runner(fm, LEASE_TTL_SECS + 15, among=["node-b"], agent="payer") == "node-b"

    def asked() -> list[dict]:
        with fm["node-b"].client() as client:
            listed = client.get("/api/v1/approvals").json()
        return [a for a in listed if a["agent"] == "payer" and a["capability"] == "spend"]

    wait_for(asked, 20, "node-b asks before the payer spends")
    time.sleep(LEASE_TTL_SECS + 2)  # the leeches' home is gone as long: nobody takes them
    assert not [t for t in spend.calls if t > killed + 1.0]  # nothing spent ungated
    for name, agent in (("node-b", "leech"), ("node-c", "raw-leech")):
        view = agent_view(fm[name], agent)
        assert view["status"] == "replica", (name, agent, view)
        assert not [e for e in events(fm[name], agent) if e["origin"] == name]
        with fm[name].client() as client:
            status = client.get("/api/v1/status").json()
        assert agent not in {s["name"] for s in status}
        assert "its operator gave no consent" in fm[name].log_path.read_text()
    payer_journal = events(fm["node-b"], "payer")
    by_b = [e for e in payer_journal if e["origin"] == "node-b"]
    assert "approval.requested" in {e["type"] for e in by_b}
    # node-b performed no spend: it asked. A `paid` it wrote can only end the tick that the kill
    # cut off after node-x's spend (ungated there) was journaled: that run resumes here from
    # its record and pays nothing again (docs/agents.md, "When a node dies mid-run")
    spent = [e for e in by_b if e["type"] == "action.performed"]
    spent += [
        e for e in by_b if e["type"] == "call.recorded" and e["data"].get("outcome", "ok") == "ok"
    ]
    assert not spent, spent
    by_x = [e for e in payer_journal if e["origin"] == X]
    left_open = {e["data"]["run"] for e in by_x if e["type"] == "call.recorded"}
    left_open -= {e["data"]["run"] for e in by_x if e["type"] == "run.closed"}
    paid = [e for e in by_b if e["type"] == "state.set" and e["data"]["key"] == "paid"]
    assert len(paid) <= len(left_open) <= 1, (paid, left_open)


def test_a_member_deploying_a_consented_name_gets_neither_a_run_nor_a_secret(hostile, built_agents):
    """node-b consents to host node-a's `billing` with the payments domain (docs/mesh.md's
    worked example, scoped to its owner). node-x starts its own journal `billing` (its seq 1:
    node-x owns it) with the secrets reader asking for payments, placed on node-x and node-b,
    and never holds its lease: node-b never takes it over, never grants it payments, and says
    once in its log whose agent it is."""
    fm, member, _spend = hostile
    sha = "sha256:" + hashlib.sha256(built_agents["secrets_reader"].read_bytes()).hexdigest()
    definition = {
        "component": "registry:leech@1.0.0",  # in the mesh's store since node-x deployed leech
        "sha256": sha,
        "grant_domains": ["payments"],
        "limits": {
            "tick_interval_ms": 200,
            "fuel_per_tick": 10**9,
            "memory_limit_mb": 64,
            "tick_timeout_ms": 10_000,
        },
    }
    placement = {"placement": [X, "node-b"], "definition": definition, "epoch": 0}
    member.publish([member.envelope("billing", 1, "", "agent.placed", placement)])
    published = time.monotonic()
    wait_for(lambda: agent_view(fm["node-b"], "billing"), 20, "node-b holds billing")
    said = "placed agent billing is not hosted here: it is owned by 'node-x', not 'node-a'"
    wait_for(lambda: said in fm["node-b"].log_path.read_text(), 20, "node-b says whose it is")
    time.sleep(max(0.0, published + LEASE_TTL_SECS + 4 - time.monotonic()))  # a takeover's time
    view = agent_view(fm["node-b"], "billing")
    assert view["status"] == "replica", view
    assert not [e for e in events(fm["node-b"], "billing") if e["origin"] == "node-b"]
    assert fm["node-b"].log_path.read_text().count(said) == 1  # once, not every look


def test_a_set_member_made_home_cannot_change_what_runs(hostile):
    """node-x advertises that it hosts node-a's `ward` with 100,000 free slots; node-a moves
    `ward` to it (a handoff). As the home, node-x appends an `agent.placed` with its own
    component, the payments domain and a set without node-a: every honest node refuses it,
    keeps node-a's definition and set, and reports a finding naming node-x."""
    fm, member, _spend = hostile
    with FalseAdvert(member, ["ward", AGENT]):
        deployed = deploy(fm["node-a"], "registry:counter@1.0.0", ["node-a", X], agent="ward")
        assert deployed.status_code == 201, deployed.text
        assert wait_runner(fm, 20, among=["node-a"], agent="ward") == "node-a"
        wait_for(
            lambda: X in (agent_view(fm["node-a"], "ward")["placement"] or {})["candidates"],
            20,
            "node-a reads node-x's advert",
        )
        with fm["node-a"].client() as client:
            moved = client.post("/api/v1/agents/ward/move", json={"to": X}, timeout=30)
        assert moved.status_code == 200, moved.text
        handoff = moved.json()["handoff_seq"]
        for name in HONEST:
            wait_for(lambda n=name: head_of(fm[n], "ward")[0] == handoff, 20, f"{name} has it")
        rewritten = {
            "placement": [X, "node-b"],
            "definition": {
                "component": "registry:leech@1.0.0",
                "sha256": "sha256:" + "e" * 64,
                "grant_domains": ["payments"],
                "capabilities": {"spend": True},
                "limits": {
                    "tick_interval_ms": 200,
                    "fuel_per_tick": 10**9,
                    "memory_limit_mb": 64,
                    "tick_timeout_ms": 10_000,
                },
            },
            "epoch": 1,
        }
        prev = hash_at(fm["node-a"], "ward", handoff)
        member.publish([member.envelope("ward", handoff + 1, prev, "agent.placed", rewritten)])
        title = "refused change of agent ward by node node-x, not its owner"
        for name in HONEST:
            found = wait_for(
                lambda n=name: [f for f in findings_titled(fm[n], title) if f["agent"] == n],
                20,
                f"{name} reports node-x's change",
            )
            assert "signed by 'node-x', not by the agent's owner 'node-a'" in found[0]["detail"]
            assert head_of(fm[name], "ward")[0] == handoff  # not stored
            placed = [e for e in events(fm[name], "ward") if e["type"] == "agent.placed"]
            assert [e["origin"] for e in placed] == ["node-a"], placed
            assert placed[-1]["data"]["placement"] == ["node-a", X]
            assert placed[-1]["data"]["definition"]["component"] == "registry:counter@1.0.0"


def test_a_leases_bucket_made_by_a_member_with_a_years_ttl_is_not_used(tmp_path):
    """node-x creates the leases bucket first, keeping keys for a year: the node refuses to
    use it, says so (log and a critical finding), and a placed deploy answers 503 naming it."""
    server = NatsServer(tmp_path / "nats", "n0").start()
    try:

        async def trap() -> None:
            from nats.js.api import StreamConfig

            nc = await nats.connect(server.url)
            try:
                await nc.jetstream().add_stream(
                    StreamConfig(
                        name=kv_stream(LEASES),
                        subjects=[f"$KV.{LEASES}.>"],
                        max_age=365 * 86400.0,
                        max_msgs_per_subject=1,
                    )
                )
            finally:
                await nc.close()

        asyncio.run(trap())
        mesh = nats_mesh_toml([server.url]) + f"lease_ttl_secs = {LEASE_TTL_SECS}\n"
        path = write_config(tmp_path / "node", mesh, name="node-a")
        node = NodeProcess(path)
        node.start(60)
        try:
            wait_for(
                lambda: findings_titled(node, "placement cannot run"), 30, "the node reports it"
            )
            (finding,) = findings_titled(node, "placement cannot run")
            assert finding["severity"] == "critical"
            assert "keeps keys 3.1536e+07 s, not 3.96-4.04 s" in finding["detail"]
            assert "nats stream rm KV_MESH_default_LEASES" in finding["detail"]
            assert "keeps keys 3.1536e+07 s" in node.log_path.read_text()
        finally:
            node.kill()
    finally:
        server.kill()


def test_a_leases_bucket_made_by_a_member_with_other_subjects_is_reported_and_sync_goes_on(
    tmp_path,
):
    """node-x creates the leases bucket first with subjects that leave out every lease key
    (and a cap of 10 messages), and the mesh's stream with a cap on messages: the node names
    each setting in a critical finding with the one command that repairs it (placement waits),
    and still publishes its journals to the mesh's stream."""
    from nats.js.api import StreamConfig

    from node.sync.nats.subjects import stream_name

    server = NatsServer(tmp_path / "nats", "n0").start()
    try:

        async def trap() -> None:
            nc = await nats.connect(server.url)
            try:
                await nc.jetstream().add_stream(
                    StreamConfig(
                        name=kv_stream(LEASES),
                        subjects=[f"$KV.{LEASES}.none.>"],
                        max_age=float(LEASE_TTL_SECS),
                        max_msgs_per_subject=1,
                        max_msgs=10,
                        deny_delete=True,
                        deny_purge=True,
                    )
                )
                await nc.jetstream().add_stream(  # the mesh's own, with a cap on messages
                    StreamConfig(
                        name=stream_name("default"),
                        subjects=["mesh.default.env.>"],
                        max_msgs=100_000,
                    )
                )
            finally:
                await nc.close()

        async def published() -> int:
            nc = await nats.connect(server.url)
            try:
                info = await nc.jetstream().stream_info(stream_name("default"))
                return int(info.state.messages)
            finally:
                await nc.close()

        asyncio.run(trap())
        mesh = nats_mesh_toml([server.url]) + f"lease_ttl_secs = {LEASE_TTL_SECS}\n"
        node = NodeProcess(write_config(tmp_path / "node", mesh, name="node-a"))
        node.start(60)
        try:
            wait_for(
                lambda: findings_titled(node, "placement cannot run"), 30, "the node reports it"
            )
            (finding,) = findings_titled(node, "placement cannot run")
            assert finding["severity"] == "critical"
            wanted = f"its subjects are ['$KV.{LEASES}.none.>'], not ['$KV.{LEASES}.>']"
            assert wanted in finding["detail"]
            assert "its max_msgs is 10, not unlimited" in finding["detail"]
            assert f"nats stream rm KV_{LEASES}" in finding["detail"]
            title = "the mesh's stream MESH_default has other settings than this node makes it"
            (reported,) = wait_for(lambda: findings_titled(node, title), 10, "it names the stream")
            assert reported["severity"] == "critical"
            assert "its max_msgs is 100000, not unlimited" in reported["detail"]
            assert "nats stream rm MESH_default" in reported["detail"]
            with node.client() as client:  # and a finding posted now reaches the stream
                before = asyncio.run(published())
                posted = client.post(
                    "/api/v1/findings",
                    json={"agent": "node-a", "severity": "low", "title": "t", "detail": "d"},
                )
                assert posted.status_code in (200, 201, 202), posted.text
            wait_for(lambda: asyncio.run(published()) > before, 20, "it still publishes")
        finally:
            node.kill()
    finally:
        server.kill()


def test_a_node_down_during_two_quick_takeovers_catches_up_and_converges(hostile):
    """Issue 51, defect 5 (no attacker needed): one honest node is down while another takes the
    agent over from its killed home, and the home, restarted, takes it back from the killed
    taker. The node that was down, started again, judges the first takeover against the stream
    as it was at that move (the home's later seqs are of a later epoch, no erasure), accepts
    both and ends with the same journal."""
    fm, _, _ = hostile
    home = wait_runner(fm, 20)
    assert home in HONEST
    first_taker, down = [n for n in HONEST if n != home]
    fm[down].kill()
    fm[home].kill()
    assert wait_runner(fm, LEASE_TTL_SECS + 20, among=[first_taker]) == first_taker
    fm[home].start(60)
    wait_for(lambda: (agent_view(fm[home]) or {}).get("status") == "replica", 30, "a replica")
    fm[first_taker].kill()
    assert wait_runner(fm, LEASE_TTL_SECS + 20, among=[home]) == home
    before = len(events(fm[home]))
    wait_for(lambda: len(events(fm[home])) >= before + 3, 20, "the second taker writes on")
    mark = len(events(fm[home]))
    fm[down].start(60)
    fm[first_taker].start(60)

    def converged(name: str) -> bool:
        """Its copy is a prefix of the home's (which ticks on) reaching past `mark`."""
        theirs, ours = events(fm[name]), events(fm[home])
        return len(theirs) >= mark and theirs == ours[: len(theirs)]

    for name in (down, first_taker):
        wait_for(lambda n=name: converged(n), 60, f"{name} caught up with the home")
    journal = events(fm[down])
    takeovers = [e for e in journal if e["type"] == "journal.takeover"]
    assert [e["origin"] for e in takeovers[-2:]] == [first_taker, home]
    view = agent_view(fm[down])
    assert view["placement"]["home"] == home
    assert view["placement"]["epoch"] == takeovers[-1]["data"]["epoch"]


def test_a_takeover_refused_by_a_live_home_killed_at_once_is_refused_everywhere(hostile):
    """Issue 51, the case bench/failover.py --attack-kills found: node-x writes its lease
    record and a takeover naming it at the head's next seq, as a taker would, while the home's
    lease is live; the home, frozen first so that it writes nothing after it, is killed -9. A
    TTL later the bucket shows the home's lease gone, yet every node refuses node-x's takeover:
    the one that was down meanwhile and reads it late, and the home restarted, as the one that
    read it in time did (the lease log shows the home live at node-x's record). Refused, it is
    no history: an honest node takes the agent over at that seq (a refused envelope ahead of
    the head held every taker back for good, seen in CI), and all converge."""
    fm, member, _ = hostile
    home = wait_runner(fm, 20)
    assert home in HONEST
    taker, late = [n for n in HONEST if n != home]
    fm[late].kill()
    epoch = agent_view(fm[home])["placement"]["epoch"]
    fm[home].proc.send_signal(signal.SIGSTOP)
    seq, prev = member.stream_head(AGENT, home)
    position = member.log_lease(AGENT, epoch + 1)
    takeover = member.envelope(
        AGENT,
        seq + 1,
        prev,
        "journal.takeover",
        {
            "epoch": epoch + 1,
            "lease_revision": 1,
            "previous_home": home,
            "lease_position": position,
        },
    )
    member.publish([takeover])
    fm[home].kill()
    assert wait_runner(fm, LEASE_TTL_SECS + 20, among=[taker]) == taker
    fm[home].start(60)
    fm[late].start(60)
    before = len(events(fm[taker]))
    wait_for(lambda: len(events(fm[taker])) >= before + 3, 20, "the taker writes on")
    mark = len(events(fm[taker]))

    def converged(name: str) -> bool:
        theirs, ours = events(fm[name]), events(fm[taker])
        return len(theirs) >= mark and theirs == ours[: len(theirs)]

    for name in (home, late):
        wait_for(lambda n=name: converged(n), 60, f"{name} caught up with the taker")
    for name in HONEST:
        journal = events(fm[name])
        assert not [e for e in journal if e["origin"] == X], name
        moves = [e for e in journal if e["type"] == "journal.takeover"]
        assert moves[-1]["origin"] == taker and moves[-1]["data"]["epoch"] == epoch + 1
        assert agent_view(fm[name])["placement"]["home"] == taker


def test_a_member_claiming_the_next_epoch_without_end_only_delays_a_planned_move(hostile):
    """node-x keeps a lease record of a later epoch live in the lease log and never takes the
    agent over. The move's target, named home by the handoff, sees that claim live at its own
    acquire record: a takeover naming it could still come, so it waits, holding its lease. Once
    the log holds its renewal a TTL past that record and it has judged what came before, no
    such takeover can be accepted anywhere (late), and it starts: the claim delays the move by
    about a TTL, where the target releasing and trying again had kept the agent down for good
    (each try a fresh record for the other nodes to see it live by)."""
    fm, member, _ = hostile
    home = wait_runner(fm, 20)
    target = next(n for n in HONEST if n != home)
    epoch = agent_view(fm[home])["placement"]["epoch"]
    with ClaimFlood(member, AGENT, epoch + 50) as flood:
        move_to(fm, home, target)
    assert flood.sent > 0
    for name in HONEST:
        wait_for(
            lambda n=name: agent_view(fm[n])["placement"]["home"] == target, 30, f"{name} follows"
        )
        moves = [
            e for e in events(fm[name]) if e["type"] in ("journal.takeover", "journal.handoff")
        ]
        assert moves[-1]["type"] == "journal.handoff", name  # nobody took it over meanwhile
