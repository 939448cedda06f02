"""Leases: each node's signed, expiring claim to be a placed agent's home, under its own key.

The bucket `MESH_<mesh>_LEASES` keeps one key per (agent, node): `<hex(agent)>.<hex(node)>`,
whose value is that node's record `{agent, holder, epoch, renewed_at}` signed by its node key.
The server forgets a key `lease_ttl_secs` after its last write. The generated NATS permissions
let a node write only the keys ending in its own name (node/sync/nats/permissions.py), and a
reader believes a record only when its key, its holder and its signature (the holder's pinned
node key) agree, so no member can write, delete or hold another node's lease: what a member
writes under its own name is its own claim, judged by the journal's placement set and home
(node/placement/manager.py, docs/mesh.md "Leases").

A node holds a lease by writing its record and renewing it (compare-and-set on its own key)
every quarter of the TTL. It must stop writing before the server can forget the key: for each
held lease it keeps `valid_until = monotonic() when the write was sent + ttl - margin`
(margin: a fifth of the TTL). The server stamps the write when it receives it, after that
moment, and keeps it for `ttl` of its own clock; so while the two clocks run at rates that
agree within margin/ttl (20 %), the key cannot expire on the server before `valid_until` passes
here. After every write the book hands `valid_until` to the `fence` hook (the journal store's
write fence: no write commits past it); when a lease is lost (the key gone, or `valid_until`
passed without a renew) it fences the journal for good (deadline 0) and calls `on_lost`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from nacl.signing import SigningKey
from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.api import RawStreamMsg
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from node.config.model import AGENT_NAME_RE, MeshSection
from node.placement.buckets import BucketRules, last_value, open_kv
from node.placement.leaselog import publish_record
from node.placement.records import (
    MAX_LEASE_BYTES,
    KeyLookup,
    LeaseRecord,
    check_record,
    lease_key,
    sign_record,
)
from node.sync.nats.subjects import Bucket, bucket_name

__all__ = ["KeyLookup", "LeaseRecord", "check_record", "lease_key", "sign_record"]

log = logging.getLogger("agent-node.placement")

Fence = Callable[[str, float | None], None]  # (journal, monotonic deadline; None lifts it)
OnLost = Callable[[str, str], None]  # (agent, reason: "expired" | "unrenewed")
OnJunk = Callable[[str, str, str], None]  # (agent, node whose key it is, what is wrong)
MARGIN_SHARE = 0.2  # of the TTL: valid_until is this much before the earliest server expiry
RENEW_SHARE = 0.25  # renew every quarter of the TTL
UNSURE_KEPT = 8  # writes whose answer never came, kept to recognise them


class LeaseError(Exception):
    """The bucket did not answer in time or refused the request: nothing is known."""


@dataclass(frozen=True)
class LeaseView:
    """A node's lease record as read from the bucket and checked."""

    agent: str
    holder: str
    epoch: int
    renewed_at: float
    revision: int  # the stream sequence of the write: lower was written first
    expires_in: float  # about: the server's stamp of the last write + ttl - this wall clock


@dataclass
class HeldLease:
    agent: str
    epoch: int
    revision: int
    valid_until: float  # time.monotonic(): no write of the agent's journal may commit after it
    position: int = 0  # the stream position of its acquire record (its lease log)
    acquired_at: float = 0.0  # time.monotonic() when that record was sent
    next_renew: float = 0.0
    # (value, monotonic when sent) of writes whose answer never came: one may have been written
    unsure: list[tuple[bytes, float]] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def _noop_fence(_journal: str, _deadline: float | None) -> None:
    pass


def _noop_lost(_agent: str, _reason: str) -> None:
    pass


def _noop_junk(_agent: str, _node: str, _why: str) -> None:
    pass


class LeaseBook:
    """This node's leases (`acquire`, renewed by `run()`, `release`) and others' (`peek`)."""

    def __init__(
        self,
        node: str,
        mesh: MeshSection,
        key: SigningKey,
        lookup: KeyLookup,
        *,
        fence: Fence = _noop_fence,
        on_lost: OnLost = _noop_lost,
        on_junk: OnJunk = _noop_junk,
    ) -> None:
        self.node = node
        self._mesh = mesh
        self._key = key
        self.lookup = lookup  # members' pinned keys: whose records and envelopes count
        self._bucket = bucket_name(mesh.name, Bucket.LEASES)
        self._fence = fence
        self._on_lost = on_lost
        self._on_junk = on_junk
        self._kv: KeyValue | None = None
        self._js: JetStreamContext | None = None
        self.ttl = mesh.lease_ttl_secs
        self.call_timeout = _call_timeout(self.ttl)
        self._held: dict[str, HeldLease] = {}
        self._changed = asyncio.Event()

    @property
    def margin(self) -> float:
        return self.ttl * MARGIN_SHARE

    async def attach(self, js: JetStreamContext) -> None:
        """Use this JetStream context (again after a reconnect); creates the bucket when
        missing. One made by someone else must keep keys exactly this node's TTL (else
        BucketError: the timing every node relies on would not hold)."""
        ttl = self._mesh.lease_ttl_secs
        kv, _ = await open_kv(
            js,
            self._bucket,
            BucketRules(ttl=ttl, ttl_range=(ttl * 0.99, ttl * 1.01)),
            replicas=self._mesh.stream_replicas,
            max_value_bytes=MAX_LEASE_BYTES,
            timeout=max(self.call_timeout, 5.0),
        )
        self._kv, self._js = kv, js

    def detach(self) -> None:
        """The connection is gone: renews fail until `attach`, so leases run out."""
        self._kv = self._js = None

    def held(self) -> dict[str, HeldLease]:
        return dict(self._held)

    def valid_until(self, agent: str) -> float | None:
        lease = self._held.get(agent)
        return lease.valid_until if lease is not None else None

    def holds(self, agent: str, epoch: int | None = None) -> bool:
        """This node holds a lease of `agent` (at `epoch`) valid now."""
        lease = self._held.get(agent)
        return (
            lease is not None
            and lease.valid_until > time.monotonic()
            and (epoch is None or lease.epoch == epoch)
        )

    def _value(self, agent: str, epoch: int) -> bytes:
        return sign_record(self._key, LeaseRecord(agent, self.node, epoch, time.time()))

    def _kv_or_fail(self) -> KeyValue:
        if self._kv is None:
            raise LeaseError("not connected to NATS")
        return self._kv

    async def acquire(self, agent: str, epoch: int) -> HeldLease:
        """Write this node's lease of `agent` at `epoch` (a new home's first write, or a claim
        of a takeover: which node is home is the journal's, not the bucket's). Returns the
        held lease; LeaseError when the bucket did not answer."""
        if not AGENT_NAME_RE.fullmatch(agent) or epoch < 0:
            raise ValueError(f"not an agent name and epoch: {agent[:80]!r}, {epoch}")
        held = self._held.get(agent)
        if held is not None and held.epoch == epoch:
            return held
        kv = self._kv_or_fail()
        key = lease_key(agent, self.node)
        value, sent = self._value(agent, epoch), time.monotonic()
        try:
            async with asyncio.timeout(self.call_timeout):
                position = await self._log(agent, value)
        except (TimeoutError, NatsError) as exc:
            raise LeaseError(f"logging the lease of {agent}: {_describe(exc)}") from exc
        try:
            async with asyncio.timeout(self.call_timeout):
                mine = await self._read(agent, self.node)
                if mine is None:
                    revision = await _create(kv, key, value)
                else:  # ours from before (a restart, an earlier epoch): carried on
                    revision = await kv.update(key, value, last=mine.seq)
        except (TimeoutError, NatsError) as exc:
            msg = await self._read(agent, self.node, exc)  # the write may have gone through
            if msg is None or msg.data != value:
                raise LeaseError(f"writing the lease of {agent}: {_describe(exc)}") from exc
            revision = msg.seq or 0
        lease = HeldLease(
            agent, epoch, revision, sent + self.ttl - self.margin, position, acquired_at=sent
        )
        lease.next_renew = sent + self.ttl * RENEW_SHARE
        if lease.valid_until <= time.monotonic():  # the answer came too late to be of use
            self._held[agent] = lease
            await self.release(agent)
            raise LeaseError(f"the lease of {agent} was written too late to be used")
        self._held[agent] = lease
        self._fence(agent, lease.valid_until)
        self._changed.set()
        return lease

    async def _log(self, agent: str, value: bytes) -> int:
        """The record in the lease log first (its position): what every judge reads. A write
        of the bucket follows only once the stream acknowledged it, within `margin` of its
        sending (so the server stamped it before `valid_until`, counted from before this call,
        could pass on its clock): `valid_until` never outlasts what the log shows live."""
        if self._js is None:
            raise LeaseError("not connected to NATS")
        within = min(self.call_timeout, self.margin)
        async with asyncio.timeout(within):
            return await publish_record(self._js, self._mesh.name, agent, self.node, value, within)

    async def _read(
        self,
        agent: str,
        node: str,
        cause: BaseException | None = None,
        js: JetStreamContext | None = None,
    ) -> RawStreamMsg | None:
        js = js or self._js
        if js is None:
            raise LeaseError("not connected to NATS")
        try:
            return await last_value(js, self._bucket, lease_key(agent, node), self.call_timeout)
        except (TimeoutError, NatsError) as exc:
            raise LeaseError(f"the leases bucket did not answer: {_describe(exc)}") from (
                cause or exc
            )

    async def renew(self, agent: str) -> bool:
        """One renew of a held lease: True when renewed, False when it failed for now (retried
        by `run`); a lease found lost is dropped, fenced and reported."""
        lease = self._held.get(agent)
        if lease is None:
            return False
        async with lease.lock:
            if self._held.get(agent) is not lease:
                return False
            return await self._renew(lease)

    async def _renew(self, lease: HeldLease) -> bool:
        agent = lease.agent
        value, sent = self._value(agent, lease.epoch), time.monotonic()
        retry = sent + min(0.5, self.ttl / 20)
        logged = False
        try:
            kv = self._kv_or_fail()
            async with asyncio.timeout(self.call_timeout):
                await self._log(agent, value)  # a failed log write is a failed renew
            logged = True
            async with asyncio.timeout(self.call_timeout):
                revision = await kv.update(lease_key(agent, self.node), value, last=lease.revision)
        except KeyWrongLastSequenceError:
            # only this node writes its key: either a write whose answer was lost went
            # through, or the server forgot the key (it expired: the lease is gone)
            try:
                msg = await self._read(agent, self.node)
            except LeaseError:
                lease.next_renew = retry
                return False
            mine = [s for v, s in lease.unsure if msg is not None and msg.data == v]
            if msg is None or not mine:
                self._lose(lease, "expired")
                return False
            if self._held.get(agent) is not lease:
                return False
            lease.revision, lease.unsure = msg.seq or 0, []
            self._extend(lease, mine[0])
            lease.next_renew = time.monotonic()  # renew again at once
            return True
        except (TimeoutError, NatsError, LeaseError) as exc:
            if logged and not isinstance(exc, LeaseError):
                lease.unsure = [*lease.unsure, (value, sent)][-UNSURE_KEPT:]
            log.info("placement: renewing the lease of %s failed: %s", agent, _describe(exc))
            lease.next_renew = retry
            return False
        if self._held.get(agent) is not lease:
            # lost meanwhile (valid_until passed): the journal stays fenced; the key is
            # deleted rather than left to look like a live home for a whole TTL
            with contextlib.suppress(TimeoutError, NatsError):
                async with asyncio.timeout(self.call_timeout):
                    await kv.delete(lease_key(agent, self.node), last=revision)
            return False
        lease.revision, lease.unsure = revision, []
        self._extend(lease, sent)
        lease.next_renew = sent + self.ttl * RENEW_SHARE
        return True

    def _extend(self, lease: HeldLease, sent: float) -> None:
        if self._held.get(lease.agent) is not lease:
            return  # lost: a late answer never lifts the fence
        lease.valid_until = max(lease.valid_until, sent + self.ttl - self.margin)
        self._fence(lease.agent, lease.valid_until)

    def _lose(self, lease: HeldLease, reason: str) -> None:
        if self._held.get(lease.agent) is not lease:
            return
        del self._held[lease.agent]
        try:
            self._fence(lease.agent, 0.0)
        except Exception:  # the owner is told all the same
            log.exception("placement: fencing %s failed", lease.agent)
        log.warning("placement: the lease of %s is lost (%s); its writes stop", lease.agent, reason)
        try:
            self._on_lost(lease.agent, reason)
        except Exception:
            log.exception("placement: on_lost(%s) failed", lease.agent)

    async def release(self, agent: str) -> bool:
        """Give the lease up (a handoff, a lost claim, the journal moved away): the journal is
        fenced first, then this node's key deleted. True when deleted; False when it held
        none. LeaseError when the bucket did not answer (the key then expires by itself)."""
        lease = self._held.get(agent)
        if lease is None:
            return False
        async with lease.lock:
            if self._held.pop(agent, None) is not lease:
                return False
            self._fence(agent, 0.0)
            try:
                kv = self._kv_or_fail()
                async with asyncio.timeout(self.call_timeout):
                    await kv.delete(lease_key(agent, self.node))
                return True
            except (TimeoutError, NatsError) as exc:
                raise LeaseError(f"releasing the lease of {agent}: {_describe(exc)}") from exc

    async def peek(
        self, agent: str, node: str, js: JetStreamContext | None = None
    ) -> LeaseView | None:
        """`node`'s lease of `agent` as the bucket's leader has it, when it holds one that is
        believed (signed by `node`, for `agent`); junk is reported (`on_junk`) and ignored.
        `js`: a connection to read with before this book is attached (the receive path's)."""
        msg = await self._read(agent, node, js=js)
        if msg is None:
            return None
        data = msg.data or b""
        checked = check_record(data, agent, node, self.lookup)
        if isinstance(checked, str):
            self._on_junk(agent, node, checked)
            return None
        stamped = msg.time.timestamp() if msg.time is not None else time.time()
        expires_in = min(self.ttl, max(0.0, stamped + self.ttl - time.time()))
        return LeaseView(
            agent, checked.holder, checked.epoch, checked.renewed_at, msg.seq or 0, expires_in
        )

    async def contenders(self, agent: str, nodes: Iterable[str], epoch: int) -> list[LeaseView]:
        """The believed leases of `agent` at `epoch` of `nodes`, first written first: of
        nodes claiming the same takeover, the one whose record came first wins."""
        found = [await self.peek(agent, node) for node in nodes]
        return sorted(
            (view for view in found if view is not None and view.epoch == epoch),
            key=lambda view: view.revision,
        )

    async def _renew_logged(self, agent: str) -> None:
        """A renew that fails in an unforeseen way is logged and tried again: the loop that
        reports lost leases must never stop."""
        try:
            await self.renew(agent)
        except Exception:
            log.exception("placement: renewing the lease of %s failed", agent)
            lease = self._held.get(agent)
            if lease is not None:
                lease.next_renew = time.monotonic() + min(0.5, self.ttl / 20)

    async def run(self) -> None:
        """Renew every held lease each quarter of the TTL (failed renews again sooner), and
        drop a lease whose `valid_until` passed. Runs until cancelled."""
        while True:
            now = time.monotonic()
            for lease in list(self._held.values()):
                if now >= lease.valid_until:  # even with a renew in flight: its answer is late
                    self._lose(lease, "unrenewed")
            due = [a for a, lease in self._held.items() if now >= lease.next_renew]
            if due:
                await asyncio.gather(*(self._renew_logged(a) for a in due))
                continue
            wake = min(
                (min(x.next_renew, x.valid_until) for x in self._held.values()),
                default=now + self.ttl * RENEW_SHARE,
            )
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), max(0.01, wake - now))


async def _create(kv: KeyValue, key: str, value: bytes) -> int:
    """`kv.create`, once more when the key expired between the server's refusal and the
    client's look at why (nats-py then raises KeyNotFoundError): the key is free now."""
    try:
        return await kv.create(key, value)
    except KeyNotFoundError:
        return await kv.create(key, value)


def _call_timeout(ttl: float) -> float:
    """The deadline of every call to the bucket: well inside a renew period."""
    return min(5.0, max(0.2, ttl * MARGIN_SHARE))


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
