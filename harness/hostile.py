"""A hostile member of a NATS mesh, played raw: its own NATS user (the generated permissions)
and its pinned node key, writing what a member may write (issue 43). tests/failover and
bench/failover.py share it."""

from __future__ import annotations

import asyncio
import base64
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

import msgspec
import nats
from nats.js.errors import NotFoundError

from eventstore.envelope import Event, digest_of, encode_event, sign, utc_now
from eventstore.keys import load_or_create_key
from harness.nats import as_member
from node.placement.components import ObjectRecord
from node.placement.components import digest_of as object_digest
from node.placement.leases import LeaseRecord, lease_key, sign_record
from node.sync.nats.envelopes import envelopes_of
from node.sync.nats.subjects import (
    MSG_ID_HEADER,
    Bucket,
    bucket_name,
    kv_subject,
    lease_subject,
    msg_id,
    stream_name,
    subject,
    token,
)

LEASES = bucket_name("default", Bucket.LEASES)
COMPONENTS = bucket_name("default", Bucket.COMPONENTS)
NODES = bucket_name("default", Bucket.NODES)


class HostileMember:
    def __init__(self, url: str, key_dir: Path, name: str = "node-x") -> None:
        self.url = url
        self.name = name
        self.key = load_or_create_key(key_dir)

    def run(self, work: Callable[[nats.NATS], Any]) -> Any:
        """`work(nc)` on a connection of this member's user, in an event loop of its own."""

        async def connected() -> Any:
            nc = await nats.connect(self.url, **as_member(self.name))
            try:
                return await work(nc)
            finally:
                await nc.close()

        return asyncio.run(connected())

    def envelope(
        self, journal: str, seq: int, prev: str, kind: str, data: dict[str, Any]
    ) -> dict[str, Any]:
        """An envelope validly signed by this member's key."""
        event = Event(type=kind, ts=utc_now(), origin=self.name, prev=prev, data=data)
        payload = encode_event(event)
        signature = sign(self.key, journal, seq, digest_of(payload))
        return {
            "seq": seq,
            "agent": journal,
            "payload": base64.b64encode(payload).decode(),
            "signature": "ed25519:" + base64.b64encode(signature).decode(),
        }

    def publish(self, envelopes: list[dict[str, Any]]) -> None:
        """On this member's own subject, as its publisher would (one message)."""
        journal, first, last = envelopes[0]["agent"], envelopes[0]["seq"], envelopes[-1]["seq"]

        async def work(nc: nats.NATS) -> None:
            await nc.jetstream().publish(
                subject("default", self.name, journal),
                msgspec.json.encode(envelopes if len(envelopes) > 1 else envelopes[0]),
                headers={MSG_ID_HEADER: msg_id(self.name, journal, first, last)},
            )

        self.run(work)

    def stream_head(self, journal: str, node: str) -> tuple[int, str]:
        """(seq, payload hash) of the last envelope of `journal` that `node` put in the mesh's
        stream: its head as every node will read it, even with `node` frozen."""

        async def work(nc: nats.NATS) -> tuple[int, str]:
            last = await nc.jetstream().get_last_msg(
                stream_name("default"), subject("default", node, journal)
            )
            envelope = msgspec.json.decode(envelopes_of(last.data or b"")[-1])
            payload = base64.b64decode(envelope["payload"])
            return int(envelope["seq"]), "sha256:" + digest_of(payload).hex()

        return self.run(work)  # type: ignore[no-any-return]

    def log_lease(self, journal: str, epoch: int) -> int:
        """This member's signed lease record of `journal` in the stream's lease log, as a
        taker writes its acquire record (node/placement/leaselog.py): its stream position."""
        value = sign_record(self.key, LeaseRecord(journal, self.name, epoch, time.time()))

        async def work(nc: nats.NATS) -> int:
            ack = await nc.jetstream().publish(lease_subject("default", self.name, journal), value)
            return int(ack.seq)

        return int(self.run(work))

    def has_components_bucket(self) -> bool:
        async def work(nc: nats.NATS) -> bool:
            try:
                await nc.jetstream().stream_info(f"OBJ_{COMPONENTS}")
            except NotFoundError:
                return False
            return True

        return bool(self.run(work))

    def forge_meta(self, sha: str) -> None:
        """A meta naming the component's checksum over chunks that are not its bytes."""

        async def work(nc: nats.NATS) -> None:
            js, nuid = nc.jetstream(), f"x{time.monotonic_ns()}"
            junk = b"\0asm" + b"x" * 1000
            await js.publish(f"$O.{COMPONENTS}.C.{nuid}", junk)
            meta = ObjectRecord(sha, COMPONENTS, nuid, len(junk), 1, object_digest(sha))
            name = base64.urlsafe_b64encode(sha.encode()).decode()
            await js.publish(f"$O.{COMPONENTS}.M.{name}", msgspec.json.encode(meta))

        self.run(work)


class MemberLoop:
    """A member's loop on a connection of its own (`HostileMember.run`), in a thread, from the
    `with` until its end (the loop looks at `_stop`)."""

    def _in_thread(self, member: HostileMember, loop: Callable[[nats.NATS], Any]) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=member.run, args=(loop,), daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)


class ClaimFlood(MemberLoop):
    """Every `period`, the member's signed lease record of `agent` at a later epoch than any
    the journal reached, in the stream's lease log: a claim it never follows with a takeover,
    held live without end. Runs in a thread; `sent` counts the records."""

    def __init__(self, member: HostileMember, agent: str, epoch: int, period: float = 0.3) -> None:
        self.member, self.agent, self.epoch, self.period = member, agent, epoch, period
        self.sent = 0
        self._in_thread(member, self._flood)

    async def _flood(self, nc: nats.NATS) -> None:
        js, where = nc.jetstream(), lease_subject("default", self.member.name, self.agent)
        while not self._stop.is_set():
            record = LeaseRecord(self.agent, self.member.name, self.epoch, time.time())
            await js.publish(where, sign_record(self.member.key, record))
            self.sent += 1
            await asyncio.sleep(self.period)


class LeaseAttack(MemberLoop):
    """Every `period`: a delete and junk on the home's lease key (the server refuses both
    under the generated permissions), junk and a next-epoch claim under the member's own key.
    `home()` names the current home (it changes with each failover). Runs in a thread."""

    def __init__(
        self,
        member: HostileMember,
        agent: str,
        home: Callable[[], str | None],
        epoch: Callable[[], int],
        period: float = 0.5,
    ) -> None:
        self.member, self.agent, self.home, self.epoch, self.period = (
            member,
            agent,
            home,
            epoch,
            period,
        )
        self.rounds = 0
        self._in_thread(member, self._attack)

    async def _attack(self, nc: nats.NATS) -> None:
        js = nc.jetstream()
        own = kv_subject(LEASES, lease_key(self.agent, self.member.name))
        while not self._stop.is_set():
            home = self.home()
            if home is not None:
                victim = kv_subject(LEASES, lease_key(self.agent, home))
                await nc.publish(victim, b"", headers={"KV-Operation": "DEL"})
                await nc.publish(victim, b"junk")
            await js.publish(own, b"\xffjunk")
            await asyncio.sleep(self.period / 2)
            record = LeaseRecord(self.agent, self.member.name, self.epoch() + 1, 0.0)
            await js.publish(own, sign_record(self.member.key, record))
            await asyncio.sleep(self.period / 2)
            self.rounds += 1


class FalseAdvert(MemberLoop):
    """The member's advert claiming it hosts `hosts` with every slot free (100,000), put under
    its own key every `period` (its real node is down). Runs in a thread."""

    def __init__(self, member: HostileMember, hosts: list[str], period: float = 0.5) -> None:
        self.member, self.hosts, self.period = member, hosts, period
        self._in_thread(member, self._advertise)

    async def _advertise(self, nc: nats.NATS) -> None:
        js = nc.jetstream()
        key = kv_subject(NODES, token(self.member.name))
        while not self._stop.is_set():
            advert = {"node": self.member.name, "hosts": self.hosts, "free_slots": 100_000}
            await js.publish(key, msgspec.json.encode(advert | {"at": time.time()}))
            await asyncio.sleep(self.period)


# a definition of the member's own: its component, a secret domain, an ungated capability
ROGUE_DEFINITION: dict[str, Any] = {
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
}
# the journal's head seq, its payload hash, epoch and home, and the payload hash of its seq 1
Head = tuple[int, str, int, str, str]


class MoveAttack(MemberLoop):
    """Every `period`, the member's moves and definition changes against the journal's head as
    `head()` reads it from an honest node, one message each, in turn: two takeovers at the next
    seq (same epoch, other lease revisions) and an `agent.placed` of its own after them (issue
    51, defect 1); one takeover and an `agent.retired` after it; an `agent.placed` with its own
    component, a secret domain and a set without the owner at the next seq (defect 3); the pair
    of takeovers at seq 2 and an `agent.halted` after them. `sent` counts the messages. Runs
    in a thread (bench/failover.py's attack run)."""

    def __init__(
        self,
        member: HostileMember,
        agent: str,
        head: Callable[[], Head | None],
        period: float = 0.5,
    ) -> None:
        self.member, self.agent, self.head, self.period = member, agent, head, period
        self.sent = 0
        self._in_thread(member, self._attack)

    def _after(self, first: dict[str, Any], kind: str, data: dict[str, Any]) -> dict[str, Any]:
        prev = "sha256:" + digest_of(base64.b64decode(first["payload"])).hex()
        return self.member.envelope(self.agent, first["seq"] + 1, prev, kind, data)

    def _takeovers(self, seq: int, prev: str, epoch: int, home: str) -> list[dict[str, Any]]:
        data = {"epoch": epoch + 1, "previous_home": home}
        return [
            self.member.envelope(
                self.agent, seq, prev, "journal.takeover", data | {"lease_revision": revision}
            )
            for revision in (1, 2)
        ]

    def envelopes(self, round_: int, head: Head) -> list[dict[str, Any]]:
        """Round `round_`'s message against `head`."""
        seq, prev, epoch, home, first = head
        placed = {"placement": [self.member.name, "node-b"], "definition": ROGUE_DEFINITION}
        kind = round_ % 4
        if kind == 0:
            pair = self._takeovers(seq + 1, prev, epoch, home)
            return [*pair, self._after(pair[1], "agent.placed", placed)]
        if kind == 1:
            (one, _) = self._takeovers(seq + 1, prev, epoch, home)
            return [one, self._after(one, "agent.retired", {"reason": "the member says so"})]
        if kind == 2:
            return [self.member.envelope(self.agent, seq + 1, prev, "agent.placed", placed)]
        pair = self._takeovers(2, first, epoch, home)
        return [*pair, self._after(pair[1], "agent.halted", {"operator": self.member.name})]

    async def _attack(self, nc: nats.NATS) -> None:
        js, where = nc.jetstream(), subject("default", self.member.name, self.agent)
        round_ = 0
        while not self._stop.is_set():
            head = await asyncio.to_thread(self.head)
            if head is not None:
                envelopes = self.envelopes(round_, head)
                # a message id of its own each time: the server's duplicate window would drop
                # a repeated attack at the same seqs
                ident = f"attack-{self.member.name}-{round_}-{time.monotonic_ns()}"
                await js.publish(
                    where, msgspec.json.encode(envelopes), headers={MSG_ID_HEADER: ident}
                )
                self.sent += 1
                round_ += 1
            await asyncio.sleep(self.period)
