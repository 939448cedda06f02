"""The NATS transport of one node: connect, then publish, consume, share heads and repair.

Runs instead of the HTTP replicators when `[mesh] transport = "nats"`. The node starts even when
no NATS server answers: this task keeps trying (with backoff) and logs once per distinct error.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import random
import time

import aiohttp
from nats.js import JetStreamContext

from node.context import NodeContext
from node.sync.acks import AckRecorder
from node.sync.incidents import Incidents
from node.sync.loops import run_together
from node.sync.nats.claims import ClaimBook
from node.sync.nats.consumer import NatsConsumer
from node.sync.nats.heads import HeadsBoard
from node.sync.nats.link import Link, connect, ensure_stream, heads_kv, repair_of
from node.sync.nats.metrics import NatsMetrics
from node.sync.nats.publisher import NatsPublisher
from node.sync.nats.raw import RawClient
from node.sync.nats.repair import HttpRepair
from node.sync.nats.repair_queue import RepairQueue
from node.sync.nats.subjects import Bucket, bucket_name, kv_stream, stream_name
from node.sync.rules.receiver import Receiver
from projections.journals import Journals

log = logging.getLogger("agent-node.sync")
REPAIR_CHECK_SECS = 1.0
STUCK_CHECKS = 5
STALLED_SECS = 20.0
CLOSE_SECS = 5.0


class NatsMesh:
    def __init__(
        self,
        ctx: NodeContext,
        receiver: Receiver,
        acks: AckRecorder,
        incidents: Incidents,
        http: aiohttp.ClientSession,
    ) -> None:
        self._ctx = ctx
        self._incidents = incidents
        self._receiver = receiver
        self._acks = acks
        self.metrics = NatsMetrics(ctx.metrics.registry)
        self.claims = ClaimBook(ctx, incidents)
        puller = HttpRepair(ctx, receiver, http)
        # lives across reconnects: repairs go on (over HTTP) while NATS is away
        self.repair = RepairQueue(ctx, receiver, puller, self.claims, self.metrics)
        self.publisher: NatsPublisher | None = None
        self.consumer: NatsConsumer | None = None
        self.heads: HeadsBoard | None = None
        self.connected = False
        self.last_error = ""
        # the live connection's JetStream context (None while away): node/placement/ uses it
        self.js: JetStreamContext | None = None
        self.nc: RawClient | None = None
        self.changed = asyncio.Event()  # set each time `js` changes (placement follows it)

    async def run(self) -> None:
        """The repair queue and the link, started again (logged, counted) if either ever
        fails: nothing else awaits this task, so a failure would otherwise end NATS sync for
        good without a word."""
        while True:
            try:
                await run_together(
                    {"nats-repair-queue": self.repair.run(), "nats-link": self._connected()},
                    grace=CLOSE_SECS,
                )
            except Exception as exc:
                self.metrics.stalls.labels("mesh").inc()
                log.error("nats mesh stopped: %s; starting again", _describe(exc))
                await asyncio.sleep(1.0)

    async def _connected(self) -> None:
        backoff = 0.2
        while True:
            nc: RawClient | None = None
            try:
                nc = await connect(self._ctx.config.mesh, self._ctx.name, self._reconnected)
                await self._serve(nc)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # keep trying: the mesh must come back by itself
                text = _describe(exc)
                if text != self.last_error:
                    log.warning("nats mesh: %s; retrying", text)
                self.connected, self.last_error = False, text
            finally:
                self.repair.js = self.js = self.nc = None
                self.changed.set()
                if nc is not None:  # a close that hangs must not hold the mesh back
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(nc.close(), CLOSE_SECS)
            await asyncio.sleep(backoff * random.uniform(0.8, 1.2))
            backoff = min(backoff * 2, 5.0)

    async def _report_settings(self, stream: str, wrong: list[str]) -> None:
        """A critical finding naming each setting of `stream` that differs (once per set of
        differences), and the repair; the stream is used all the same."""
        if not wrong:
            return
        digest = hashlib.sha256("; ".join(wrong).encode()).hexdigest()[:16]
        title = f"the mesh's stream {stream} has other settings than this node makes it with"
        await self._incidents.report(
            f"stream-settings/{stream}/{digest}", "critical", title, repair_of(stream, wrong)
        )

    async def _reconnected(self) -> None:
        if self.publisher is not None:
            self.publisher.reconnected()
        if self.consumer is not None:
            self.consumer.reconnected()
        if self.heads is not None:
            self.heads.reconnected()

    async def _serve(self, nc: RawClient) -> None:
        js = nc.jetstream(timeout=10)
        mesh = self._ctx.config.mesh
        await self._report_settings(stream_name(mesh.name), await ensure_stream(js, mesh))
        kv, wrong = await heads_kv(js, mesh)
        await self._report_settings(kv_stream(bucket_name(mesh.name, Bucket.HEADS)), wrong)
        link = Link(self._ctx, nc, js, self.metrics, self._incidents)
        self.publisher = NatsPublisher(link)
        self.consumer = NatsConsumer(link, self._receiver, self.repair)
        self.heads = HeadsBoard(link, kv, self._acks, self.claims)
        self.repair.js = self.js = js
        self.nc = nc
        self.changed.set()
        if not self.connected:
            log.info("nats mesh %s: connected", mesh.name)
        self.connected, self.last_error = True, ""
        # not a TaskGroup: a loop that lost its one cancellation would hold the link forever
        await run_together(
            {
                "nats-publish": self.publisher.run(),
                "nats-consume": self.consumer.run(),
                "nats-heads-put": self.heads.publish(),
                "nats-heads-watch": self.heads.watch(),
                "nats-repair-check": self._repair_check(),
            },
            grace=CLOSE_SECS,
        )

    async def _repair_check(self) -> None:
        """A journal some peer (by its checked claims, nats/claims.py) holds further than this
        node, while the consumer has nothing
        left to deliver, twice in a row (or at the same head for STUCK_CHECKS checks while
        less than a batch waits on the stream): the stream does not hold it (retention, a node
        that joined late, a lost stream); pull it over HTTP."""
        assert self.heads is not None and self.consumer is not None
        behind_before: dict[str, int] = {}
        stuck_for: dict[str, tuple[int, int]] = {}  # journal → (checks at this head, head)
        while True:
            await asyncio.sleep(REPAIR_CHECK_SECS)
            self._check_beats()
            await asyncio.wait_for(self.consumer.look_at_lag(), STALLED_SECS)
            held = self._ctx.projections.get(Journals).head
            home = self._ctx.projections.get(Journals).home
            behind: dict[str, int] = {}
            for heads in self.claims.admitted().values():
                for journal, seq in heads.items():
                    if journal.startswith("$") or home.get(journal) == self._ctx.name:
                        continue
                    if seq > held.get(journal, 0):
                        behind[journal] = max(behind.get(journal, 0), seq)
            quiet = self.consumer.pending == 0
            # a backlog on the stream explains a journal that does not move (its envelopes
            # wait behind others'): repairing it then would fetch them twice
            backlog = self.consumer.waiting_envelopes >= self._ctx.config.mesh.fetch_batch
            for journal, want in behind.items():
                # behind twice in a row with nothing left on the stream, or behind at the same
                # head for STUCK_CHECKS checks without a backlog whatever the stream says
                stuck = stuck_for.get(journal, (0, -1))
                count = stuck[0] + 1 if stuck[1] == held.get(journal, 0) and not backlog else 0
                stuck_for[journal] = (count, held.get(journal, 0))
                if (quiet and journal in behind_before) or count >= STUCK_CHECKS:
                    self.repair.request(journal, want)  # in the background: never waits
            stuck_for = {j: v for j, v in stuck_for.items() if j in behind}
            behind_before = behind

    def _check_beats(self) -> None:
        """A loop that stopped turning (it hangs on a call that never answers, or cannot get
        going again) ends the connection: every loop starts over on a new one."""
        assert self.heads is not None and self.consumer is not None
        beats = {
            "consume": self.consumer.beat,
            "heads-put": self.heads.put_beat,
            "heads-read": self.heads.read_beat,
        }
        now = time.monotonic()
        stalled = sorted(loop for loop, beat in beats.items() if now - beat > STALLED_SECS)
        if stalled:
            for loop in stalled:
                self.metrics.stalls.labels(loop).inc()
            quiet_for = now - min(beats[loop] for loop in stalled)
            raise ConnectionError(
                f"nats loop {', '.join(stalled)} stalled for {quiet_for:.0f} s; reconnecting"
            )


def _describe(exc: BaseException) -> str:
    """One line naming the failure (each failure of a task group, not the group)."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
