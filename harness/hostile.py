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
from typing import Any

import msgspec
import nats
from nats.js.errors import NotFoundError

from eventstore.envelope import Event, digest_of, encode_event, sign, utc_now
from eventstore.keys import load_or_create_key
from harness.nats import as_member
from node.placement.components import ObjectRecord
from node.placement.components import digest_of as object_digest
from node.placement.leases import LeaseRecord, lease_key, sign_record
from node.sync.nats.subjects import (
    MSG_ID_HEADER,
    Bucket,
    bucket_name,
    kv_subject,
    msg_id,
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


class LeaseAttack:
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
        self._stop = threading.Event()
        self._thread = threading.Thread(target=member.run, args=(self._attack,), daemon=True)

    def __enter__(self) -> LeaseAttack:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)

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


class FalseAdvert:
    """The member's advert claiming it hosts `hosts` with every slot free (100,000), put under
    its own key every `period` (its real node is down). Runs in a thread."""

    def __init__(self, member: HostileMember, hosts: list[str], period: float = 0.5) -> None:
        self.member, self.hosts, self.period = member, hosts, period
        self._stop = threading.Event()
        self._thread = threading.Thread(target=member.run, args=(self._advertise,), daemon=True)

    def __enter__(self) -> FalseAdvert:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)

    async def _advertise(self, nc: nats.NATS) -> None:
        js = nc.jetstream()
        key = kv_subject(NODES, token(self.member.name))
        while not self._stop.is_set():
            advert = {"node": self.member.name, "hosts": self.hosts, "free_slots": 100_000}
            await js.publish(key, msgspec.json.encode(advert | {"at": time.time()}))
            await asyncio.sleep(self.period)
