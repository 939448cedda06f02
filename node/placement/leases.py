"""Leases: which node is a placed agent's home now, in a key-value bucket with a TTL.

The bucket `MESH_<mesh>_LEASES` keeps one key per agent (hex of its name) whose value is
`{holder, epoch, renewed_at}`; the server forgets a key `lease_ttl_secs` after its last write.
Acquiring is a create (refused while anyone holds the key), renewing an update with the last
revision (compare-and-set: refused once anyone else wrote the key), releasing a delete with
the last revision. So at most one node holds a key at a time, as the server sees it.

The holder must stop writing before the server can let another node take the key: for each
held lease it keeps `valid_until = monotonic() when the acquire/renew request was sent + ttl -
margin` (margin: a fifth of the TTL). The server stamps the write when it receives it, after
that moment, and keeps it for `ttl` of its own clock; so while the two clocks run at rates that
agree within margin/ttl (20 %), the lease cannot expire on the server before `valid_until`
passes here. Wall clocks need not agree (docs/mesh.md, "Leases"). After every acquire and
successful renew the book hands `valid_until` to the `fence` hook (the journal store's write
fence: no write commits past it), and when a lease is lost (taken, gone, or `valid_until`
passed without a renew) it fences the journal for good (deadline 0) and calls `on_lost`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec
from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.api import RawStreamMsg
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from node.config.model import AGENT_NAME_RE, MeshSection
from node.placement.buckets import last_value, open_kv
from node.sync.nats_subjects import Bucket, bucket_name, token

log = logging.getLogger("agent-node.placement")

Fence = Callable[[str, float | None], None]  # (journal, monotonic deadline; None lifts it)
OnLost = Callable[[str, str], None]  # (agent, reason: "taken" | "expired" | "unrenewed")
MAX_LEASE_BYTES = 1024
MARGIN_SHARE = 0.2  # of the TTL: valid_until is this much before the earliest server expiry
RENEW_SHARE = 0.25  # renew every quarter of the TTL
UNSURE_KEPT = 8  # renew requests whose answer never came, kept to recognise their write


class LeaseRecord(msgspec.Struct):  # fields added later are ignored by this version
    holder: str
    epoch: int
    renewed_at: float  # the holder's wall clock: for people, never for a decision


_decoder = msgspec.json.Decoder(LeaseRecord)


class LeaseError(Exception):
    """The bucket did not answer in time or refused the request: nothing is known."""


@dataclass(frozen=True)
class LeaseView:
    """A lease as read from the bucket. `holder` "" and `epoch` -1: a value that is no lease
    record (a member's junk); it still holds the key until the bucket forgets it."""

    agent: str
    holder: str
    epoch: int
    renewed_at: float
    revision: int
    expires_in: float  # about: the server's stamp of the last write + ttl - this wall clock


@dataclass
class HeldLease:
    agent: str
    epoch: int
    revision: int
    valid_until: float  # time.monotonic(): no write of the agent's journal may commit after it
    next_renew: float = 0.0
    # (value, monotonic when sent) of renews whose answer never came: one may have been written
    unsure: list[tuple[bytes, float]] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def _noop_fence(_journal: str, _deadline: float | None) -> None:
    pass


def _noop_lost(_agent: str, _reason: str) -> None:
    pass


class LeaseBook:
    """The leases this node holds, renewed by `run()`; `acquire`, `release`, `holder`."""

    def __init__(
        self,
        node: str,
        mesh: MeshSection,
        *,
        fence: Fence = _noop_fence,
        on_lost: OnLost = _noop_lost,
    ) -> None:
        self.node = node
        self._mesh = mesh
        self._bucket = bucket_name(mesh.name, Bucket.LEASES)
        self._fence = fence
        self._on_lost = on_lost
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
        missing. The bucket's own TTL (its first creator's) is the one computed with."""
        kv, ttl = await open_kv(
            js,
            self._bucket,
            ttl=self._mesh.lease_ttl_secs,
            replicas=self._mesh.stream_replicas,
            max_value_bytes=MAX_LEASE_BYTES,
            timeout=max(self.call_timeout, 5.0),
        )
        if ttl != self._mesh.lease_ttl_secs:
            log.warning(
                "placement: the leases bucket keeps keys %.1f s, not lease_ttl_secs %.1f s; "
                "using the bucket's",
                ttl,
                self._mesh.lease_ttl_secs,
            )
        self.ttl, self._kv, self._js = ttl, kv, js
        self.call_timeout = _call_timeout(ttl)

    def detach(self) -> None:
        """The connection is gone: renews fail until `attach`, so leases run out."""
        self._kv = self._js = None

    def held(self) -> dict[str, HeldLease]:
        return dict(self._held)

    def valid_until(self, agent: str) -> float | None:
        lease = self._held.get(agent)
        return lease.valid_until if lease is not None else None

    def _value(self, epoch: int) -> bytes:
        return msgspec.json.encode(LeaseRecord(self.node, epoch, time.time()))

    def _kv_or_fail(self) -> KeyValue:
        if self._kv is None:
            raise LeaseError("not connected to NATS")
        return self._kv

    async def acquire(self, agent: str, epoch: int) -> HeldLease | None:
        """Take the agent's lease for `epoch` if nobody holds it: the lease, or None when it is
        held (by anyone, this node included; a lease this book holds already is returned as
        it is). LeaseError when the bucket did not answer."""
        if not AGENT_NAME_RE.fullmatch(agent) or epoch < 0:
            raise ValueError(f"not an agent name and epoch: {agent[:80]!r}, {epoch}")
        if agent in self._held:
            return self._held[agent]
        kv = self._kv_or_fail()
        value, sent = self._value(epoch), time.monotonic()
        try:
            async with asyncio.timeout(self.call_timeout):
                revision = await _create(kv, token(agent), value)
        except KeyWrongLastSequenceError:
            return None
        except (TimeoutError, NatsError) as exc:
            # the create may have been written and its answer lost: ours if the value is
            msg = await self._read(agent, exc)
            if msg is None:  # free, yet the create was not answered: nothing is known
                raise LeaseError(f"acquiring the lease of {agent}: {_describe(exc)}") from exc
            if msg.data != value:
                return None
            revision = msg.seq or 0
        lease = HeldLease(agent, epoch, revision, sent + self.ttl - self.margin)
        lease.next_renew = sent + self.ttl * RENEW_SHARE
        if lease.valid_until <= time.monotonic():  # the answer came too late to be of use
            self._held[agent] = lease
            await self.release(agent)
            raise LeaseError(f"the lease of {agent} was granted too late to be used")
        self._held[agent] = lease
        self._fence(agent, lease.valid_until)
        self._changed.set()
        return lease

    async def _written(
        self, agent: str, candidates: list[tuple[bytes, float]], cause: BaseException
    ) -> int | None:
        """The revision of the key when its value is one of ours (a write whose answer was
        lost), None when the key holds something else; LeaseError when unreadable."""
        msg = await self._read(agent, cause)
        if msg is None or not any(msg.data == value for value, _ in candidates):
            return None
        return msg.seq

    async def _read(self, agent: str, cause: BaseException | None = None) -> RawStreamMsg | None:
        if self._js is None:
            raise LeaseError("not connected to NATS")
        try:
            return await last_value(self._js, self._bucket, token(agent), self.call_timeout)
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
        value, sent = self._value(lease.epoch), time.monotonic()
        retry = sent + min(0.5, self.ttl / 20)
        try:
            kv = self._kv_or_fail()
            async with asyncio.timeout(self.call_timeout):
                revision = await kv.update(token(agent), value, last=lease.revision)
        except KeyWrongLastSequenceError:
            try:
                msg = await self._read(agent)
            except LeaseError:
                lease.next_renew = retry
                return False
            mine = [s for v, s in lease.unsure if msg is not None and msg.data == v]
            if msg is None or not mine:
                self._lose(lease, "taken" if msg is not None else "expired")
                return False
            if self._held.get(agent) is not lease:
                return False
            # a renew whose answer was lost was written: carry on from it
            lease.revision, lease.unsure = msg.seq or 0, []
            self._extend(lease, mine[0])
            lease.next_renew = time.monotonic()  # renew again at once
            return True
        except (TimeoutError, NatsError, LeaseError) as exc:
            if not isinstance(exc, LeaseError):
                lease.unsure = [*lease.unsure, (value, sent)][-UNSURE_KEPT:]
            log.info("placement: renewing the lease of %s failed: %s", agent, _describe(exc))
            lease.next_renew = retry
            return False
        if self._held.get(agent) is not lease:
            # lost meanwhile (valid_until passed): the journal stays fenced; the key is
            # given back rather than left to block a takeover for a whole TTL
            with contextlib.suppress(TimeoutError, NatsError):
                async with asyncio.timeout(self.call_timeout):
                    await kv.delete(token(agent), last=revision)
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
        """Give the lease up (after a handoff): the journal is fenced first, then the key
        deleted with the last revision. True when deleted; False when it was not ours any
        more (the key expires by itself). LeaseError when the bucket did not answer."""
        lease = self._held.get(agent)
        if lease is None:
            return False
        async with lease.lock:
            if self._held.pop(agent, None) is not lease:
                return False
            self._fence(agent, 0.0)
            try:
                kv = self._kv_or_fail()
                try:
                    async with asyncio.timeout(self.call_timeout):
                        await kv.delete(token(agent), last=lease.revision)
                    return True
                except KeyWrongLastSequenceError:
                    revision = await self._written(agent, lease.unsure, KeyError(agent))
                    if revision is None:
                        return False
                    async with asyncio.timeout(self.call_timeout):
                        await kv.delete(token(agent), last=revision)
                    return True
            except (TimeoutError, NatsError) as exc:
                raise LeaseError(f"releasing the lease of {agent}: {_describe(exc)}") from exc

    async def holder(self, agent: str) -> LeaseView | None:
        """The agent's lease as the bucket's leader has it, or None when nobody holds it."""
        msg = await self._read(agent)
        if msg is None:
            return None
        data = msg.data or b""
        record = None
        if len(data) <= MAX_LEASE_BYTES:
            with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
                record = _decoder.decode(data)
        if record is not None and not (
            AGENT_NAME_RE.fullmatch(record.holder) and record.epoch >= 0
        ):
            record = None
        stamped = msg.time.timestamp() if msg.time is not None else time.time()
        expires_in = min(self.ttl, max(0.0, stamped + self.ttl - time.time()))
        if record is None:
            return LeaseView(agent, "", -1, 0.0, msg.seq or 0, expires_in)
        return LeaseView(
            agent, record.holder, record.epoch, record.renewed_at, msg.seq or 0, expires_in
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
