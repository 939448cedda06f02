"""The outbox's fold of the journal: every envelope in the journal's total order, from a durable
cursor, becomes the notifications it implies.

- `push.configured` / `push.removed`: a task's push config in force, or no more;
- a task's change of state (projections/states.py, read through `Tasks.changes`): one entry per
  config of the task set before that change, holding the task as it was then;
- an approval request still pending once folded (a request a policy decided in the same write
  is not): one entry per matching channel, and an escalation due before it times out; its
  resolution drops what was not sent yet, and queues a follow-up (decided, expired,
  abandoned) to each channel that was told of it and asks for that event;
- an inference budget's crossing of 80 % or 100 % (a finding with its `inference-budget`
  incident key, journaled once per window): one entry per channel whose `on` has `budget`;
- `delivery.progress`: deliveries another node (or this one) finished: their entries go;
- a journal's change of home: its lanes are looked at again (only the home delivers).

Entries and the cursor are committed together, so after `kill -9` the fold resumes exactly
where its last commit left it; envelopes after it that implied nothing are folded again, to
the same nothing. A commit that fails (the disk) leaves its chunk to be folded again, on the
book rebuilt from the store: the book never holds what the store lacks. The fold runs on
the loop, a bounded chunk at a time, after the read models folded the same envelopes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from urllib.parse import quote

from eventstore.envelope import Envelope
from node.context import NodeContext
from node.delivery import book as b
from node.delivery import channels as ch
from node.delivery import push
from node.delivery import store as s
from node.delivery.metrics import DeliveryMetrics
from node.delivery.waits import next_turn
from node.display.humanize import visible
from node.display.request_summary import elide
from node.inference.notices import is_budget_incident
from node.protocols.a2a_model import TaskViews
from projections import catalogue as c
from projections.approvals import Approvals, Resolution
from projections.states import FINAL_TASK_STATES, ApprovalChanged, TaskChanged, a2a_state
from projections.tasks import Tasks

log = logging.getLogger(__name__)
CHUNK = 512
CHUNK_BYTES = 1 << 20
CURSOR_EVERY_SECS = 2.0  # the cursor of a stretch that implied nothing is written this often
OWN_TYPES = frozenset({c.PUSH_CONFIGURED, c.PUSH_REMOVED, c.DELIVERY_PROGRESS})
MOVES = frozenset({c.JOURNAL_HANDOFF, c.JOURNAL_TAKEOVER, c.AGENT_MOVED_IN})


class Ingester:
    def __init__(
        self,
        ctx: NodeContext,
        book: b.Book,
        writer: s.Writer,
        channels: ch.Channels,
        metrics: DeliveryMetrics,
        on_ready: Callable[[set[str]], None],
        on_moved: Callable[[set[str]], None],
    ) -> None:
        self.ctx = ctx
        self.book = book
        self.writer = writer
        self.channels = channels
        self.metrics = metrics
        self.on_ready = on_ready
        self.on_moved = on_moved
        delivery = ctx.config.delivery
        self.deadline_secs = delivery.deadline_secs
        self.max_body = delivery.max_body_kb * 1024
        p = ctx.projections
        self.tasks = p.get(Tasks)
        self.approvals = p.get(Approvals)
        self.views = TaskViews(self.tasks, self.approvals)
        self.cursor = 0
        self._written_at = 0.0
        self._advanced = asyncio.Event()
        # live: the commit listener hands over the envelopes that may imply something, so the
        # journal's hot path (logs, findings) costs one set lookup each, never a second read
        self._interesting = OWN_TYPES | MOVES | {c.FINDING} | frozenset(self.tasks.handles)
        self._live: list[Envelope] | None = None
        self._seen = 0
        self._wake = asyncio.Event()
        self._stale = False  # the book may differ from the store: rebuilt before the next fold

    def start_at(self, stored: int | None) -> None:
        """Where the fold starts: the stored cursor, or (a new outbox) the journal's end."""
        self.cursor = stored if stored is not None else self.ctx.store.last_position

    def go_live(self) -> None:
        """Follow commits from now on; called once `step` has caught up with the journal,
        with nothing awaited in between (so no commit falls between the two)."""
        assert self.cursor >= self.ctx.store.last_position, "catch up first"
        self._live, self._seen = [], self.cursor
        self.ctx.store.add_commit_listener(self.on_commit)

    def on_commit(self, envelopes: list[Envelope]) -> None:
        if self._live is None or not envelopes:
            return
        interesting = self._interesting
        self._live.extend(e for e in envelopes if e.event.type in interesting)
        self._seen = envelopes[-1].position
        self._wake.set()

    async def run(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            try:
                if await self.step():
                    continue
            except Exception:
                log.exception("the outbox could not fold position %d; retrying", self.cursor + 1)
                failed = True
            else:
                failed = False
            self._wake.clear()
            if failed:  # a second before the next try
                await next_turn(stopping, 1.0)
            else:
                await next_turn(stopping, None, self._wake)

    async def step(self) -> bool:
        """Fold one bounded chunk (from the journal until live, then what the commits handed
        over); False when there was nothing to fold."""
        self.metrics.lag.set(max(self.ctx.store.last_position - self.cursor, 0))
        if self._live is not None:
            if self._seen <= self.cursor:
                return False
            chunk, last = self._live[:CHUNK], self._seen
            if len(self._live) > CHUNK:
                last = chunk[-1].position
            went = await self._fold_chunk(chunk, last)
            del self._live[: len(chunk)]  # only once folded and committed: else tried again
            return went
        store = self.ctx.store
        folded = store.last_position
        if folded <= self.cursor:
            return False
        chunk = [
            e
            for e in store.read_all_bounded(self.cursor, CHUNK, CHUNK_BYTES)
            if e.position <= folded
        ]
        if not chunk:
            return False
        return await self._fold_chunk(chunk, chunk[-1].position)

    async def _fold_chunk(self, chunk: list[Envelope], last: int) -> bool:
        if self._stale:
            await self._reload()
        ops: list[s.Op] = []
        ready: set[str] = set()
        moved: set[str] = set()
        now = time.time()
        try:
            for envelope in chunk:
                self.fold(envelope, ops, ready, moved, now)
            if ops or now - self._written_at >= CURSOR_EVERY_SECS:
                ops.append(s.put_cursor(last))
                await self.writer.submit(ops)
                self._written_at = now
        except BaseException as exc:
            # the book holds what the store may not (the disk failed, or the fold did): it is
            # rebuilt from the store before the same chunk is folded again
            self._stale = True
            if isinstance(exc, Exception):
                with contextlib.suppress(Exception):
                    await self._reload()
            raise
        self.cursor = last
        self._advanced.set()
        self._advanced.clear()
        if ready:
            self.on_ready(ready)
        if moved:
            self.on_moved(moved)
        return True

    async def _reload(self) -> None:
        """The book as the store holds it, once every write submitted so far has ended (so
        none lands after the rebuild); its lanes are scheduled again."""
        await self.writer.idle()
        self.book.reload(self.writer.store)
        self._stale = False
        log.warning("the outbox's book was rebuilt from its store after a failed write")
        self.on_ready(set(self.book.pending))

    async def reached(self, position: int, timeout: float = 5.0) -> None:
        """Once the fold has passed `position` (read-your-writes for a config just set)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self.cursor < position:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                raise TimeoutError(f"the outbox did not reach position {position}")
            waiter = asyncio.ensure_future(self._advanced.wait())
            try:
                await asyncio.wait({waiter}, timeout=left)
            finally:
                waiter.cancel()

    # ------------------------------------------------------------------ the fold
    def fold(
        self, envelope: Envelope, ops: list[s.Op], ready: set[str], moved: set[str], now: float
    ) -> None:
        stream = envelope.stream
        if stream[:1] in ("$", "@"):
            return
        kind = envelope.event.type
        if kind in OWN_TYPES:
            self._own(envelope, ops, now)
        elif kind in MOVES:
            moved.add(stream)
        elif kind == c.FINDING and is_budget_incident(stream, envelope.event.data.get("incident")):
            self._budget(envelope, ops, ready, now)
        for change in self.tasks.changes(envelope):
            if isinstance(change, TaskChanged):
                if change.before != change.after:
                    self._task_changed(change, envelope, ops, ready, now)
            elif change.requested:
                self._requested(change, envelope, ops, ready, now)
            elif change.outcome is not None:
                self._resolved(change, envelope, ops, ready, now)

    def _own(self, envelope: Envelope, ops: list[s.Op], now: float) -> None:
        payload = c.payload_of(envelope)
        book = self.book
        if isinstance(payload, c.PushConfigured):
            if book.config_room(payload.task, payload.id, payload.client) is None:
                config = s.PushConfig(
                    task=payload.task,
                    id=payload.id,
                    client=payload.client,
                    journal=envelope.stream,
                    seq=envelope.seq,
                    created_at=envelope.event.ts,
                    sealed=payload.sealed,
                )
                ops += book.set_config(config, now)
        elif isinstance(payload, c.PushRemoved):
            ops += book.remove_config(payload.task, payload.id, now)
        elif isinstance(payload, c.DeliveryProgress):
            for done in payload.done:
                parsed = b.parse_entry_id(done)
                if parsed is not None:
                    seq, n, lane = parsed
                    ops += book.forget_entry(lane, seq, n)

    def _task_changed(
        self,
        change: TaskChanged,
        envelope: Envelope,
        ops: list[s.Op],
        ready: set[str],
        now: float,
    ) -> None:
        configs = [
            config
            for config in self.book.configs_of(change.task)
            if config.journal == envelope.stream and config.seq < envelope.seq
        ]
        task = self.tasks.get(change.task) if configs else None
        if task is None:
            return
        ts = envelope.event.ts
        body = push.body_at(self.views, task, change.after, ts, self.max_body)
        made_at = ch.epoch(ts, now)
        for config in configs:
            lane = self.book.lane(b.push_lane_id(config.task, config.id))
            if lane is None or lane.closed:
                continue
            entry = s.Entry(
                id=b.entry_id(envelope.seq, 0, lane.id),
                lane=lane.id,
                journal=envelope.stream,
                seq=envelope.seq,
                n=0,
                kind="push",
                label=a2a_state(change.after),
                made_at=made_at,
                due=now,
                deadline=made_at + self.deadline_secs,
                body=body,
            )
            ops += self.book.enqueue(lane, entry, now)
            self.metrics.enqueued.labels(kind="push").inc()
            ready.add(lane.id)
            if change.after in FINAL_TASK_STATES:
                ops += self.book.close(lane, "final", now, drop=False)

    def _requested(
        self,
        change: ApprovalChanged,
        envelope: Envelope,
        ops: list[s.Op],
        ready: set[str],
        now: float,
    ) -> None:
        request = self.approvals.get(change.approval)  # None unless still pending
        if request is None:
            return
        notice = self.channels.notice(request, self._caller(request.task))
        made_at = ch.epoch(envelope.event.ts, now)
        deadline = min(ch.epoch(request.expires_at, now), made_at + self.deadline_secs)
        for channel in self.channels.matching(request):
            lane = self.book.open_lane(
                b.approval_lane_id(request.id, channel.name),
                b.APPROVAL,
                envelope.stream,
                request.id,
                channel.name,
            )
            for n, event in enumerate((ch.REQUESTED, ch.ESCALATED)):
                if event not in channel.on:
                    continue
                due = now if event == ch.REQUESTED else self.channels.escalation_at(request)
                entry = s.Entry(
                    id=b.entry_id(envelope.seq, n, lane.id),
                    lane=lane.id,
                    journal=envelope.stream,
                    seq=envelope.seq,
                    n=n,
                    kind=channel.kind,
                    label=event,
                    made_at=made_at if event == ch.REQUESTED else due,
                    due=due,
                    deadline=deadline,
                    body=_body(channel.kind, event, notice, envelope.event.ts),
                )
                ops += self.book.enqueue(lane, entry, now)
                self.metrics.enqueued.labels(kind=channel.kind).inc()
            ready.add(lane.id)

    def _budget(self, envelope: Envelope, ops: list[s.Op], ready: set[str], now: float) -> None:
        """An inference budget crossed 80 % or 100 % (node/inference/notices.py journals that
        once per window): one notice to each channel whose `on` has `budget`."""
        finding = c.payload_of(envelope)
        if not isinstance(finding, c.Finding) or finding.incident is None:
            return
        agent = finding.subject or envelope.stream
        notice = self.channels.budget_notice(finding.title, finding.detail, agent, finding.severity)
        made_at = ch.epoch(envelope.event.ts, now)
        for channel in self.channels.hearing_budgets(agent):
            lane = self.book.open_lane(
                b.budget_lane_id(finding.incident, channel.name),
                b.BUDGET,
                envelope.stream,
                finding.incident,
                channel.name,
            )
            if lane.closed:  # told already: the fold of this envelope again
                continue
            entry = s.Entry(
                id=b.entry_id(envelope.seq, 0, lane.id),
                lane=lane.id,
                journal=envelope.stream,
                seq=envelope.seq,
                n=0,
                kind=channel.kind,
                label=ch.BUDGET,
                made_at=made_at,
                due=now,
                deadline=made_at + self.deadline_secs,
                body=ch.budget_body(channel.kind, notice, envelope.event.ts),
            )
            ops += self.book.enqueue(lane, entry, now)
            ops += self.book.close(lane, "final", now, drop=False)
            self.metrics.enqueued.labels(kind=channel.kind).inc()
            ready.add(lane.id)

    def _caller(self, task_id: str | None) -> str | None:
        """Who asked: the token that created the task (or the agent that did)."""
        task = self.tasks.get(task_id) if task_id else None
        if task is None:
            return None
        return task.created_by or task.from_ or None

    def _resolved(
        self,
        change: ApprovalChanged,
        envelope: Envelope,
        ops: list[s.Op],
        ready: set[str],
        now: float,
    ) -> None:
        event = ch.FOLLOW_UPS.get(change.outcome or "")
        resolution = self.approvals.resolution(change.approval) if event else None
        for channel in self.channels.channels:
            lane = self.book.lane(b.approval_lane_id(change.approval, channel.name))
            if lane is None or lane.closed:
                continue
            dropped = lane.pending
            ops += self.book.close(lane, "resolved", now, drop=True)
            if dropped:
                self.metrics.ended.labels(kind=channel.kind, how="resolved").inc(dropped)
            if resolution is None or event not in channel.on:
                continue
            lane.closed = ""  # open for the follow-up alone, then closed behind it
            notice = self.channels.follow_up(self._told(resolution), resolution)
            made_at = ch.epoch(envelope.event.ts, now)
            entry = s.Entry(
                id=b.entry_id(envelope.seq, 2, lane.id),
                lane=lane.id,
                journal=envelope.stream,
                seq=envelope.seq,
                n=2,
                kind=channel.kind,
                label=event,
                made_at=made_at,
                due=now,
                deadline=made_at + self.deadline_secs,
                body=_body(channel.kind, event, notice, envelope.event.ts),
            )
            ops += self.book.enqueue(lane, entry, now)
            ops += self.book.close(lane, "resolved", now, drop=False)
            self.metrics.enqueued.labels(kind=channel.kind).inc()
            ready.add(lane.id)

    def _told(self, resolution: Resolution) -> ch.Notice:
        """The notice of a resolved request, from what its resolution keeps."""
        console = self.channels.console
        return ch.Notice(
            id=resolution.id,
            agent=resolution.agent,
            capability=visible(elide(resolution.capability, ch.MAX_TITLE)),
            summary=visible(elide(resolution.detail, ch.MAX_SUMMARY)),
            requested_at="",
            expires_at="",
            timeout_secs=0,
            task=None,
            node=self.ctx.config.node.name,
            console_url=f"{console}#/inbox/{quote(resolution.id, safe='')}",
        )

    def on_rewind(self, stream: str, removed: list[Envelope]) -> None:
        """A journal was cut back (a fork between epochs): what its removed envelopes implied
        and was not delivered yet goes."""
        if not removed:
            return
        first = min(e.seq for e in removed)
        ops = self.book.forget_after(stream, first)
        if ops:
            future = self.writer.submit(ops)
            future.add_done_callback(lambda f: f.exception())


def _body(kind: str, event: str, notice: ch.Notice, at: str) -> bytes:
    if kind == "webhook":
        return ch.webhook_body(event, notice, at)
    return ch.chat_body(event, notice)
