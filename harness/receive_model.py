"""A model of the receive rules with a hostile member (issue 51; docs/mesh.md, "The model of
the receive rules").

Three honest nodes (node-a, the owner and first home; node-b, a member of the placement set;
node-c, a replica outside it) and a member (node-m, in the set, with a key of its own). Each
honest node is the real thing as far as the receive rules go: its own LMDB journal in a temp
dir, its read models, its pinned keys, the real `Receiver` (node/sync/rules/) and the real
takeover judge (node/placement/judge.py, with the lease log's reads, leaselog.py). What is
modelled is only NATS: the stream is a list of messages (publisher, subject, server stamp of a
model clock, envelopes or a signed lease record), served to the judge as the JetStream calls
it makes (`ModelJetStream`: last message by subject, next by subject, and STREAM.MSG.GET with
`start_time`). No nats-server runs: the model's speed is in examples per second, and the
judge's inputs are exactly the ones a real stream gives it.

Hypothesis drives `ReceiveModel` (a RuleBasedStateMachine): time passes (the stamps are
monotonic); the honest home writes while its fence holds (its last lease record's stamp + TTL -
margin: acknowledged) and renews its lease (a record in the stream's lease log), or dies (no
more renewals: its lease lapses a TTL after its last record); an honest member takes over as
the placement manager does (its acquire record in the log, catching up, the home's lease
lapsed at that record by the log, then the takeover naming it); the home hands over; a node
its copy names home that does not write (restarted, or the handoff's target) takes its lease
again as the manager does, waiting while another node's claim of a later epoch may still be
named by a takeover; the member
publishes validly signed envelopes of any kind (takeovers naming any position, handoffs,
placed, retired, halted, findings) at any seq and epoch, duplicated, several per message, and
lease records of its own at any time; each honest node reads the stream when the model says,
in batches of any size, through `receive` or through `stage` and `settle` (the NATS consumer's
halves), early or late. After every step:

- no acknowledged envelope a node held is gone from it;
- no takeover was accepted while the home it replaced was live at its lease record's position
  (computed here from the model's stream, apart from the judge's code);
- honest nodes that have read the whole stream hold the same journal;
- what runs (the placement set and definition) changes only by the owner's signature
  (`OWNER_STRICT`: the owner rule of issue 51 item 1; without it, only a change by a node that
  was not home at that seq counts).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from nacl.signing import SigningKey
from nats.js.errors import NotFoundError

from eventstore.envelope import Event, digest_of, encode_event, sign
from eventstore.keys import public_key_multibase
from harness.mesh import SYNC_TUNING, peer_toml
from harness.node import make_config
from node.app import core_projections, open_store
from node.context import NodeContext
from node.ops.metrics import NodeMetrics
from node.placement.judge import TakeoverJudge
from node.placement.leaselog import iso_of, stamp_of
from node.placement.leases import MARGIN_SHARE
from node.placement.records import LeaseRecord, SignedLease, sign_record
from node.sync.nats.subjects import lease_subject, stream_name, subject
from node.sync.service import SyncService
from projections import catalogue as c
from projections.journals import Journals
from projections.placements import Placements

JOURNAL = "worker"
MESH = "model"
OWNER, HOME_B, REPLICA = HONEST = ("node-a", "node-b", "node-c")
MEMBER = "node-m"
PLACEMENT = (OWNER, HOME_B, MEMBER)
KEYS = {name: SigningKey(bytes([n]) * 32) for n, name in enumerate((*HONEST, MEMBER), 11)}
LIMITS = c.AgentLimits(tick_interval_ms=1, fuel_per_tick=1, memory_limit_mb=1, tick_timeout_ms=1)
DEFINITION = c.AgentDefinition(component="registry:worker@1", sha256="", limits=LIMITS)
ROGUE = c.AgentDefinition(component="registry:rogue@1", sha256="", limits=LIMITS)
STREAM_PEER = "(stream)"
WHAT_RUNS = frozenset({c.AGENT_PLACED, c.AGENT_RETIRED, c.AGENT_HALTED, c.AGENT_UNHALTED})
# the owner rule (issue 51 item 1) is checked strictly when the receive rules have it
OWNER_STRICT = os.environ.get("MODEL_OWNER_STRICT", "") == "1"
# honest nodes only (the member publishes nothing): what the model finds then needs no attacker
HONEST_ONLY = os.environ.get("MODEL_HONEST_ONLY", "") == "1"


TTL = 10.0  # the model's lease TTL, in model seconds (the nodes' `lease_ttl_secs`)
MARGIN = TTL * MARGIN_SHARE  # an honest holder's fence ends this long before its record lapses


@dataclass
class Message:
    position: int  # its stream sequence, from 1
    publisher: str
    envelopes: list[dict[str, Any]]
    stamp: float = 0.0  # the server's stamp (the model's clock)
    lease: bytes | None = None  # a lease log message: its signed record

    @property
    def data(self) -> bytes:
        return self.lease if self.lease is not None else msgspec.json.encode(self.envelopes)

    @property
    def subject(self) -> str:
        if self.lease is not None:
            return lease_subject(MESH, self.publisher, JOURNAL)
        return subject(MESH, self.publisher, JOURNAL)


@dataclass
class Stream:
    messages: list[Message] = field(default_factory=list)
    now: float = 1_000_000.0  # the server's clock: only ever goes forward

    def publish(self, publisher: str, envelopes: list[dict[str, Any]]) -> Message:
        message = Message(len(self.messages) + 1, publisher, envelopes, self.now)
        self.messages.append(message)
        return message

    def log_lease(self, holder: str, epoch: int, key: SigningKey | None = None) -> Message:
        """A lease record of `holder` in its lease log (signed by `key`: its own unless junk)."""
        record = LeaseRecord(JOURNAL, holder, epoch, self.now)
        message = Message(
            len(self.messages) + 1, holder, [], self.now, sign_record(key or KEYS[holder], record)
        )
        self.messages.append(message)
        return message

    def live_at(self, holder: str, position: int, later_than: int = -1) -> bool:
        """The rule, computed apart from the judge's code: a record of `holder` (its own key,
        at an epoch above `later_than`) before `position` stamped within a TTL before it."""
        if not 1 <= position <= len(self.messages):
            return False
        at = self.messages[position - 1].stamp
        return any(
            m.lease is not None
            and m.publisher == holder
            and m.stamp > at - TTL
            and _record_of(m).holder == holder
            and _record_of(m).epoch > later_than
            and m.lease == sign_record(KEYS[holder], _record_of(m))
            for m in self.messages[: position - 1]
        )

    def last_record(self, holder: str) -> Message | None:
        found = [m for m in self.messages if m.lease is not None and m.publisher == holder]
        return found[-1] if found else None


def _record_of(message: Message) -> LeaseRecord:
    signed_lease = msgspec.json.decode(message.lease or b"", type=SignedLease)
    return msgspec.json.decode(signed_lease.record.encode(), type=LeaseRecord)


class _Raw(msgspec.Struct):
    seq: int
    data: bytes


class _Info:
    class state:
        first_seq = 1


class ModelJetStream:
    """The JetStream calls the judge makes, answered from the model's stream."""

    _prefix = "$JS.API"

    def __init__(self, stream: Stream) -> None:
        self._stream = stream

    def _on(self, name: str, where: str | None) -> list[Message]:
        assert name == stream_name(MESH), name
        return [m for m in self._stream.messages if where is None or m.subject == where]

    async def get_last_msg(self, name: str, where: str) -> _Raw:
        found = self._on(name, where)
        if not found:
            raise NotFoundError()
        return _Raw(found[-1].position, found[-1].data)

    async def get_msg(
        self,
        name: str,
        seq: int | None = None,
        subject: str | None = None,
        direct: bool = False,
        next: bool = False,
    ) -> _Raw:
        for m in self._on(name, subject):
            if m.position == seq or (next and m.position >= (seq or 0)):
                return _Raw(m.position, m.data)
        raise NotFoundError()

    async def _api_request(self, api: str, body: bytes, timeout: float = 5) -> dict[str, Any]:
        """STREAM.MSG.GET as nats-server answers it: by `seq`, or the first message on
        `next_by_subj` from `seq` or from `start_time` (the first stamp at or after it)."""
        assert api == f"$JS.API.STREAM.MSG.GET.{stream_name(MESH)}", api
        request = msgspec.json.decode(body)
        where = request.get("next_by_subj")
        if "start_time" in request:
            since = stamp_of(request["start_time"])
            start = next(
                (m.position for m in self._stream.messages if m.stamp >= since - 1e-6),
                len(self._stream.messages) + 1,
            )
        else:
            start = int(request.get("seq") or 1)
        for m in self._stream.messages[start - 1 :]:
            if where is None and m.position != start:
                break
            if where is None or m.subject == where:
                return {
                    "message": {
                        "seq": m.position,
                        "subject": m.subject,
                        "time": iso_of(m.stamp),
                        "data": base64.b64encode(m.data).decode(),
                    }
                }
        raise NotFoundError()

    async def stream_info(self, name: str) -> _Info:
        return _Info()


class JudgesLeases:
    """What the judge asks of its LeaseBook: the TTL and the members' pinned keys."""

    def __init__(self, lookup: Any) -> None:
        self.lookup = lookup
        self.ttl = TTL


_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
_SIGNED = itertools.count(1)


def signed(
    origin: str, seq: int, prev: str, payload: c.Payload | None, **finding: Any
) -> dict[str, Any]:
    kind, data = c.event_of(payload) if payload is not None else ("finding", finding)
    # a new time for each: two envelopes alike are alike only when the model copies one (a
    # clock's microsecond would make a run's moves equivocations or duplicates by chance)
    ts = (_EPOCH + timedelta(microseconds=next(_SIGNED))).isoformat(timespec="microseconds")
    ts = ts.replace("+00:00", "Z")
    event = Event(type=kind, ts=ts, origin=origin, prev=prev, data=data)
    raw = encode_event(event)
    digest = digest_of(raw)
    return {
        "seq": seq,
        "agent": JOURNAL,
        "payload": base64.b64encode(raw).decode(),
        "signature": "ed25519:"
        + base64.b64encode(sign(KEYS[origin], JOURNAL, seq, digest)).decode(),
    }


def digest_of_pushed(envelope: dict[str, Any]) -> str:
    return "sha256:" + digest_of(base64.b64decode(envelope["payload"])).hex()


class HonestNode:
    def __init__(self, name: str, root: Path, stream: Stream) -> None:
        self.name = name
        self.root = root / name
        self.stream = stream
        self.cursor = 0  # messages of the stream read (its own skipped)
        self.held_acked: dict[int, str] = {}  # acknowledged envelopes it held: seq → digest
        self.published = 0  # its own journal's seqs in the stream
        self.ctx: NodeContext | None = None

    async def open(self) -> None:
        peers = "".join(
            peer_toml(
                other,
                "http://127.0.0.1:9",
                accepts=f"sync-{other}-to-{self.name}-000000",
                presents="unused-token-0000000000",
                public_key=public_key_multibase(KEYS[other].verify_key),
            )
            for other in (*HONEST, MEMBER)
            if other != self.name
        )
        mesh = f'\n[mesh]\ntransport = "nats"\nname = "{MESH}"\nnats_servers = ["nats://127.0.0.1:9"]\n'
        # never listened on: the model calls the receive rules, not the node's HTTP server
        port = 20_000 + HONEST.index(self.name)
        config = make_config(self.root, SYNC_TUNING + mesh + peers, name=self.name, port=port)
        config.data_path.mkdir(parents=True, exist_ok=True)
        store = open_store(config, KEYS[self.name])
        ctx = NodeContext(
            config=config,
            key=KEYS[self.name],
            store=store,
            projections=core_projections(store),
            metrics=NodeMetrics(),
        )
        store.catch_up_index()
        ctx.projections.rebuild(store.iter_chunks())
        store.add_commit_listener(ctx.projections.apply)
        store.add_rewind_listener(lambda _s, _r: ctx.projections.refold(store.iter_chunks()))
        store.start()
        self.ctx = ctx
        self.sync = SyncService(ctx)
        await self.sync.keys.pin_configured()
        self.js = ModelJetStream(self.stream)
        judges = JudgesLeases(self.sync.keys.lookup)
        self.sync.receiver.judge = TakeoverJudge(ctx, judges, lambda: self.js)  # type: ignore[arg-type, return-value]

    async def close(self) -> None:
        if self.ctx is not None:
            await self.ctx.store.close()

    @property
    def journals(self) -> Journals:
        assert self.ctx is not None
        return self.ctx.projections.get(Journals)

    def journal(self) -> list[str]:
        assert self.ctx is not None
        head = self.ctx.store.head(JOURNAL)
        envelopes = self.ctx.store.read_stream(JOURNAL, 0, head.seq) if head else []
        return [e.payload_hash for e in envelopes]

    def events(self) -> list[tuple[int, str, str]]:
        """(seq, signer, type) of its copy of the journal."""
        assert self.ctx is not None
        head = self.ctx.store.head(JOURNAL)
        envelopes = self.ctx.store.read_stream(JOURNAL, 0, head.seq) if head else []
        return [(e.seq, e.event.origin, e.event.type) for e in envelopes]

    def envelopes_from(self, seq: int) -> list[dict[str, Any]]:
        assert self.ctx is not None
        return [e.as_pushed() for e in self.ctx.store.read_stream(JOURNAL, seq - 1, 10_000)]

    async def read(self, count: int, staged: bool) -> list[dict[str, Any]]:
        """The next `count` messages of the stream as one batch (its own are skipped, as the
        consumer skips them); the moves it accepted."""
        assert self.ctx is not None
        upto = min(len(self.stream.messages), self.cursor + count)
        items = [
            msgspec.Raw(msgspec.json.encode(envelope))
            for message in self.stream.messages[self.cursor : upto]
            if message.publisher != self.name
            for envelope in message.envelopes
        ]
        self.cursor = upto
        before = self.journals.moves_of(JOURNAL)
        if items:
            receiver = self.sync.receiver
            if staged:
                await receiver.settle(STREAM_PEER, await receiver.stage(items))
            else:
                await receiver.receive(STREAM_PEER, items)
        after = self.journals.moves_of(JOURNAL)
        return [move for move in after if move not in before]

    def caught_up(self) -> bool:
        return self.cursor == len(self.stream.messages)


class ReceiveModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        # in memory where the machine has it: every example opens three LMDB journals, whose
        # fsyncs on a busy disk would take most of its time (it models no crash)
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
        self.dir = Path(tempfile.mkdtemp(prefix="receive-model-", dir=shm))
        self.stream = Stream()
        self.nodes = {name: HonestNode(name, self.dir, self.stream) for name in HONEST}
        # an honest holder's fence (model time): its last logged record's stamp + TTL - margin
        self.fence: dict[str, float] = {}
        self.dead: set[str] = set()  # honest nodes that stopped (no renewals, no writes)
        self.member_records: list[int] = []  # positions of the member's lease records
        # a named home taking its lease again: its acquire record, while it waits to start
        self.retaking: dict[str, Message] = {}
        self.acked: dict[int, str] = {}  # seq → digest, published under a live lease
        self.violations: list[str] = []
        self.member_revision = 0
        self.run(self._start())

    def run(self, work: Any) -> Any:
        return self.loop.run_until_complete(work)

    def append(self, node: HonestNode, payload: c.Payload, sealing: bool = False) -> None:
        """Append to `node`'s own copy (the store's appends want the running loop)."""
        assert node.ctx is not None
        store = node.ctx.store

        async def appended() -> None:
            kind, data = c.event_of(payload)
            await (store.append_sealing if sealing else store.append)(JOURNAL, kind, data)

        self.run(appended())

    async def _start(self) -> None:
        for node in self.nodes.values():
            await node.open()
        owner = self.nodes[OWNER]
        assert owner.ctx is not None
        owner.ctx.store.own(JOURNAL)
        placed = c.AgentPlaced(placement=list(PLACEMENT), definition=DEFINITION)
        await owner.ctx.store.append(JOURNAL, *c.event_of(placed))
        self._log_lease(owner, 0)
        self._publish(owner)

    def teardown(self) -> None:
        try:
            for node in self.nodes.values():
                try:
                    self.run(node.close())
                except BaseException as exc:
                    print("teardown failed", node.name, repr(exc))
        finally:
            self.loop.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------------ the honest nodes
    def _log_lease(self, node: HonestNode, epoch: int) -> Message:
        """An honest lease write: its record in the log first; the fence counts from it."""
        message = self.stream.log_lease(node.name, epoch)
        self.fence[node.name] = message.stamp + TTL - MARGIN
        return message

    def _fenced_ok(self, name: str) -> bool:
        return name not in self.dead and self.stream.now < self.fence.get(name, 0.0)

    def _home(self) -> HonestNode | None:
        """The honest node that writes the journal now: its copy names it home, it owns the
        journal in its store, and its fence holds (its last lease record is fresh)."""
        for node in self.nodes.values():
            j = node.journals
            assert node.ctx is not None
            if (
                j.home_of(JOURNAL) == node.name
                and not node.ctx.store.disowned(JOURNAL)
                and self._fenced_ok(node.name)
            ):
                return node
        return None

    def _publish(self, node: HonestNode, pieces: int = 1) -> None:
        """What `node` wrote and did not publish yet, in `pieces` messages; acknowledged when
        published while its fence holds."""
        signers = {seq: signer for seq, signer, _ in node.events()}
        envelopes = node.envelopes_from(node.published + 1)
        # its own, as its publisher sends each envelope it commits (others' it holds are theirs)
        envelopes = [
            e for e in envelopes if e["seq"] > node.published and signers[e["seq"]] == node.name
        ]
        if not envelopes:
            return
        live = self._fenced_ok(node.name)
        size = max(1, -(-len(envelopes) // pieces))
        for start in range(0, len(envelopes), size):
            self.stream.publish(node.name, envelopes[start : start + size])
        for envelope in envelopes:
            if live:
                self.acked[envelope["seq"]] = digest_of_pushed(envelope)
        node.published = envelopes[-1]["seq"]

    @rule(seconds=st.sampled_from([0.5, 2.0, 4.0, 9.0, 12.0]))
    def time_passes(self, seconds: float) -> None:
        self.stream.now += seconds

    @rule(count=st.integers(1, 4), pieces=st.integers(1, 3))
    def home_writes(self, count: int, pieces: int) -> None:
        home = self._home()
        if home is None:
            return
        assert home.ctx is not None
        store = home.ctx.store

        async def write() -> None:
            for n in range(count):
                await store.append(
                    JOURNAL, "finding", {"severity": "info", "title": f"w{n}", "detail": ""}
                )

        self.run(write())
        self._publish(home, pieces)

    @rule()
    def home_renews(self) -> None:
        """The home's renewal (every quarter of a TTL, when it is alive): a record in the log,
        its fence extended from it. One whose fence passed lost its lease for good; so does a
        home waiting to take its lease again."""
        home = self._home()
        if home is not None:
            self._log_lease(home, home.journals.epoch_of(JOURNAL))
        for name in list(self.retaking):
            if self._fenced_ok(name) and self.nodes[name].journals.home_of(JOURNAL) == name:
                self._log_lease(self.nodes[name], self.nodes[name].journals.epoch_of(JOURNAL))
            else:
                del self.retaking[name]  # lost, or moved away: released

    @rule(name=st.sampled_from([OWNER, HOME_B]))
    def named_home_retakes(self, name: str) -> None:
        """A node its copy names home, not writing (restarted, or the target of a handoff it
        had not taken up), as the placement manager does (node/placement/takeover.py
        `_become_home`): its acquire record in the log (kept while it waits), the stream read;
        while another node's record of a later epoch is live at that record, it starts only
        once its own renewal stamped over a TTL after it is in the stream, read through, and
        it is still named home (a takeover naming an earlier record is late by then)."""
        node = self.nodes[name]
        if name in self.dead or self._home() is node:
            return
        self._read_all(node)
        j = node.journals
        if j.home_of(JOURNAL) != name or self._home() is not None:
            return
        epoch = j.epoch_of(JOURNAL)
        acquired = self.retaking.get(name)
        if acquired is None or not self._fenced_ok(name):
            acquired = self.retaking[name] = self._log_lease(node, epoch)
            self._read_all(node)
        claimed = any(
            other != name and self.stream.live_at(other, acquired.position, later_than=epoch)
            for other in PLACEMENT
        )
        if claimed:
            renewed = self.stream.last_record(name)
            if renewed is None or renewed.stamp <= acquired.stamp + TTL:
                return  # a takeover naming the claim may still come: wait, holding the lease
            self._read_all(node)
            if node.journals.home_of(JOURNAL) != name:
                return
        del self.retaking[name]
        assert node.ctx is not None
        node.ctx.store.own(JOURNAL)
        node.ctx.store.fence(JOURNAL, None)
        node.published = len(node.journal())

    @rule()
    def home_dies(self) -> None:
        """The home dies, or freezes, or loses NATS: it writes and renews nothing more, and
        reads nothing (a takeover it never read it cannot refute). Its lease lapses in the log
        a TTL after its last record."""
        home = self._home()
        if home is not None:
            self.dead.add(home.name)
            assert home.ctx is not None
            home.ctx.store.disown(JOURNAL)

    @rule(name=st.sampled_from([OWNER, HOME_B]))
    def waiting_home_dies(self, name: str) -> None:
        """A named home waiting to take its lease again dies or freezes: it renews, reads and
        starts nothing more; the lease it held while it waited lapses a TTL after its last
        record, and no takeover may name it lapsed before."""
        if self.retaking.pop(name, None) is not None:
            self.dead.add(name)

    @rule(taker=st.sampled_from([OWNER, HOME_B]), slow=st.booleans())
    def honest_takeover(self, taker: str, slow: bool = False) -> None:
        """As the placement manager does (node/placement/takeover.py): a home whose lease
        seems gone, its acquire record in the log, the stream read through it, the home's lease
        lapsed at that record by the log (else it gives up), then the takeover naming it,
        unless the record is too old to name by then (`slow`: catching up took over a TTL)."""
        node = self.nodes[taker]
        if taker in self.dead:
            return
        self._read_all(node)
        j = node.journals
        home, epoch = j.home_of(JOURNAL), j.epoch_of(JOURNAL)
        if home is None or home == taker:
            return
        last = self.stream.last_record(home)
        if last is not None and last.stamp > self.stream.now - TTL:
            return  # its record looks live (the bucket's trigger): nothing to do
        acquired = self._log_lease(node, epoch + 1)
        self._read_all(node)
        if self.stream.live_at(home, acquired.position):
            return
        if slow:
            self.stream.now += TTL + 0.5
        if self.stream.now - acquired.stamp > TTL - MARGIN:
            self.fence[taker] = 0.0  # it released its lease, to try again with a new record
            return
        j = node.journals
        if j.home_of(JOURNAL) != home or j.epoch_of(JOURNAL) != epoch:
            return  # a move came in as it read
        assert node.ctx is not None
        node.ctx.store.own(JOURNAL)
        node.ctx.store.fence(JOURNAL, None)  # the model's fence is `_fenced_ok`
        node.published = len(node.journal())  # what it holds is the stream's, not its own
        takeover = c.JournalTakeover(
            epoch=epoch + 1,
            lease_revision=1,
            previous_home=home,
            lease_position=acquired.position,
        )
        self.append(node, takeover)
        self._publish(node)

    @rule(to=st.sampled_from([OWNER, HOME_B]))
    def home_hands_off(self, to: str) -> None:
        home = self._home()
        if home is None or home.name == to or to in self.dead:
            return
        self._read_all(home)  # a live home's consumer has read the stream
        if self._home() is not home:
            return
        assert home.ctx is not None
        epoch = home.journals.epoch_of(JOURNAL) + 1
        handoff = c.JournalHandoff(to=to, epoch=epoch)
        self.append(home, handoff, sealing=True)
        self._publish(home)
        self.fence[home.name] = 0.0  # it released its lease (its records stay in the log)
        self.named_home_retakes(to)  # the target takes it up

    def _read_all(self, node: HonestNode) -> None:
        while not node.caught_up():
            self._read(node, len(self.stream.messages), False)

    def _read(self, node: HonestNode, count: int, staged: bool, then_dies: bool = False) -> None:
        if node.name in self.dead:
            return  # down: it reads once it restarts (late)
        moves = self.run(node.read(count, staged))
        if then_dies and self._home() is node:
            self.home_dies()  # killed before what it wrote as it read was published
        else:
            self._publish(node)  # what it wrote as it read (a takeover refuted), home or not
        for move in moves:
            if move["reason"] != "takeover":
                continue
            takeover = self._takeover_at(node, int(move["seq"]))
            if takeover is None or self.stream.live_at(move["from"], takeover.lease_position):
                self.violations.append(
                    f"{node.name} accepted the takeover at seq {move['seq']} by {move['to']} "
                    f"while {move['from']} was live at its lease record "
                    f"({takeover.lease_position if takeover else '?'})"
                )

    def _takeover_at(self, node: HonestNode, seq: int) -> c.JournalTakeover | None:
        assert node.ctx is not None
        stored = node.ctx.store.get(JOURNAL, seq)
        if stored is None or stored.event.type != c.JOURNAL_TAKEOVER:
            return None
        return c.read(c.JournalTakeover, stored.event.data)

    @rule(
        name=st.sampled_from(HONEST),
        count=st.integers(1, 6),
        staged=st.booleans(),
        then_dies=st.booleans(),
    )
    def node_reads(self, name: str, count: int, staged: bool, then_dies: bool) -> None:
        """An honest node reads the next messages; a home may be killed right after, before it
        published what it wrote as it read (a takeover it refuted)."""
        self._read(self.nodes[name], count, staged, then_dies)

    @rule(name=st.sampled_from(HONEST))
    def node_restarts(self, name: str) -> None:
        """A dead node comes back: its lease is gone (a replica now, unless a move names it),
        it publishes what it had not, and reads on from where it stood (late)."""
        if name in self.dead:
            self.dead.discard(name)
            self.fence[name] = 0.0
            self._publish(self.nodes[name])

    # ------------------------------------------------------------------ the member
    @rule(epoch=st.integers(-1, 2), junk=st.booleans())
    def member_lease(self, epoch: int, junk: bool) -> None:
        """The member's lease record at any epoch, any time (or one signed by another key)."""
        if HONEST_ONLY:
            return
        base = max(n.journals.epoch_of(JOURNAL) for n in self.nodes.values())
        key = KEYS[REPLICA] if junk else None
        message = self.stream.log_lease(MEMBER, max(0, base + epoch), key)
        self.member_records.append(message.position)

    @rule(seq_off=st.integers(-2, 0), previous=st.sampled_from([None, OWNER, HOME_B]))
    def member_takes_over(self, seq_off: int, previous: str | None) -> None:
        """The member's takeover as an honest taker writes one (its lease record at the next
        epoch, then the takeover naming it), at any time: the home live or not."""
        if HONEST_ONLY:
            return
        longest = max(self.nodes.values(), key=lambda n: len(n.journal()))
        chain, j = longest.journal(), longest.journals
        epoch = j.epoch_of(JOURNAL) + 1
        seq = max(1, len(chain) + 1 + seq_off)
        acquired = self.stream.log_lease(MEMBER, epoch)
        self.member_records.append(acquired.position)
        takeover = c.JournalTakeover(
            epoch=epoch,
            lease_revision=1,
            previous_home=previous or j.home_of(JOURNAL) or OWNER,
            lease_position=acquired.position,
        )
        prev = chain[seq - 2] if seq > 1 else ""
        self.stream.publish(MEMBER, [signed(MEMBER, seq, prev, takeover)])

    @rule(
        moves=st.lists(
            st.tuples(
                st.sampled_from(
                    ["takeover", "takeover", "handoff", "placed", "retired", "halted", "finding"]
                ),
                st.integers(-2, 2),  # seq, from the longest honest copy's head + 1
                st.integers(-1, 2),  # epoch, from that copy's epoch + 1
                st.integers(0, 3),  # variant: lease revision, previous home, handoff target
                st.booleans(),  # prev: the honest copy's digest (else the member's own last)
            ),
            min_size=1,
            max_size=4,
        ),
        copies=st.integers(1, 2),
    )
    def member_publishes(self, moves: list[tuple[str, int, int, int, bool]], copies: int) -> None:
        if HONEST_ONLY:
            return
        longest = max(self.nodes.values(), key=lambda n: len(n.journal()))
        chain = longest.journal()
        j = longest.journals
        envelopes: list[dict[str, Any]] = []
        own_last: dict[int, str] = {}
        for kind, seq_off, epoch_off, variant, honest_prev in moves:
            seq = max(1, len(chain) + 1 + seq_off)
            epoch = max(0, j.epoch_of(JOURNAL) + 1 + epoch_off)
            if honest_prev and seq - 1 <= len(chain):
                prev = chain[seq - 2] if seq > 1 else ""
            else:
                prev = own_last.get(seq - 1, chain[-1] if chain else "")
            payload: c.Payload | None
            if kind == "takeover":
                previous = [j.home_of(JOURNAL) or OWNER, OWNER, HOME_B, MEMBER][variant]
                records = self.member_records or [0]
                position = [records[-1], records[-1], records[0], len(self.stream.messages)]
                payload = c.JournalTakeover(
                    epoch=epoch,
                    lease_revision=variant + 1,
                    previous_home=previous,
                    lease_position=position[(variant + seq) % 4],
                )
            elif kind == "handoff":
                payload = c.JournalHandoff(
                    to=[MEMBER, OWNER, HOME_B, REPLICA][variant], epoch=epoch
                )
            elif kind == "placed":
                placement = [[MEMBER, HOME_B], list(PLACEMENT), [MEMBER], [OWNER, MEMBER]][variant]
                payload = c.AgentPlaced(placement=placement, definition=ROGUE)
            elif kind == "retired":
                payload = c.AgentRetired(reason="the member says so")
            elif kind == "halted":
                payload = c.AgentHalted(operator="member")
            else:
                payload = None
            envelope = signed(MEMBER, seq, prev, payload, severity="info", title="m", detail="")
            own_last[seq] = digest_of_pushed(envelope)
            envelopes.append(envelope)
        self.stream.publish(MEMBER, envelopes * copies)

    # ------------------------------------------------------------------ invariants
    @invariant()
    def nothing_acknowledged_is_removed(self) -> None:
        for node in self.nodes.values():
            chain = node.journal()
            for seq, digest in node.held_acked.items():
                assert seq <= len(chain) and chain[seq - 1] == digest, (
                    f"{node.name} lost the acknowledged seq {seq}"
                )
            for seq, digest in self.acked.items():
                if seq <= len(chain) and chain[seq - 1] == digest:
                    node.held_acked[seq] = digest

    @invariant()
    def no_takeover_while_the_home_is_live(self) -> None:
        assert not self.violations, self.violations[0]

    @invariant()
    def nodes_that_read_the_stream_agree(self) -> None:
        # a node that is down is not reading: what it wrote and never published (a refutation
        # as it was killed) it publishes when it restarts, before it reads on
        read = [n for n in self.nodes.values() if n.caught_up() and n.name not in self.dead]
        if len(read) < 2:
            return
        first = read[0]
        for other in read[1:]:
            assert other.journal() == first.journal(), (
                f"{first.name} and {other.name} read the same stream and differ: "
                f"{len(first.journal())} against {len(other.journal())} envelopes, homes "
                f"{first.journals.home_of(JOURNAL)} and {other.journals.home_of(JOURNAL)}"
            )

    @invariant()
    def only_the_owner_changes_what_runs(self) -> None:
        for node in self.nodes.values():
            placed = node.ctx.projections.get(Placements).get(JOURNAL) if node.ctx else None
            if placed is None:
                continue
            if OWNER_STRICT:
                assert placed.definition == DEFINITION and tuple(placed.placement) == PLACEMENT, (
                    f"{node.name} runs a definition or set the owner did not sign: "
                    f"{placed.definition.component} on {placed.placement}"
                )
                assert not placed.retired, f"{node.name} retired the agent without its owner"
            else:
                # before the owner rule: what runs changes only by the journal's writer at that
                # seq (the single-writer rule); the owner rule tightens this to the owner alone
                for seq, origin, kind in node.events():
                    if kind in WHAT_RUNS:
                        writer = node.journals.writer_at(JOURNAL, seq)
                        assert writer in (None, origin), (
                            f"{node.name} took {kind} at seq {seq} by {origin}, its writer "
                            f"being {writer}"
                        )
