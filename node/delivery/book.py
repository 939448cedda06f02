"""The outbox in memory: lanes, their pending entries (keys and sizes, not bodies), the push
configs in force and each client's totals, mirroring the store; and the rules that change them
(enqueue within the limits, end an entry, close a lane), each returning the store's ops.

On the loop only. The store is the durable copy; the book is rebuilt from it at start.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

from node.config.model import DeliverySection
from node.delivery import store as s
from node.delivery.store import Entry, Lane, PushConfig

PUSH, APPROVAL, BUDGET = "push", "approval", "budget"


@dataclass(frozen=True)
class Pending:
    seq: int
    n: int
    size: int
    due: float
    entry_id: str
    journal: str


@dataclass(frozen=True)
class Limits:
    per_task: int
    per_task_bytes: int
    per_client: int
    per_client_bytes: int
    configs_per_task: int
    configs_per_client: int

    @classmethod
    def of(cls, section: DeliverySection) -> Limits:
        return cls(
            per_task=section.max_pending_per_task,
            per_task_bytes=section.max_pending_kb_per_task * 1024,
            per_client=section.max_pending_per_client,
            per_client_bytes=section.max_pending_kb_per_client * 1024,
            configs_per_task=section.max_configs_per_task,
            configs_per_client=section.max_configs_per_client,
        )


def push_lane_id(task: str, config_id: str) -> str:
    return f"push/{task}/{config_id}"


def approval_lane_id(approval: str, channel: str) -> str:
    return f"approval/{approval}/{channel}"


def budget_lane_id(incident: str, channel: str) -> str:
    return f"budget/{incident}/{channel}"


def entry_id(seq: int, n: int, lane: str) -> str:
    return f"{seq}.{n}:{lane}"


def parse_entry_id(text: str) -> tuple[int, int, str] | None:
    head, sep, lane = text.partition(":")
    seq, dot, n = head.partition(".")
    if not (sep and dot and seq.isdigit() and n.isdigit() and lane):
        return None
    return int(seq), int(n), lane


class Book:
    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.lanes: dict[str, Lane] = {}
        self.pending: dict[str, deque[Pending]] = {}
        self.configs: dict[str, dict[str, PushConfig]] = {}  # task → id → config
        self.client_configs: dict[str, int] = {}
        self.client_totals: dict[str, list[int]] = {}  # client → [count, bytes]
        self.done: dict[str, list[str]] = {}  # journal → entry ids ended, not yet journaled

    # ------------------------------------------------------------------ loading
    def load(self, store: s.OutboxStore) -> None:
        for lane in store.all_lanes():
            self.lanes[lane.id] = lane
            lane.pending, lane.pending_bytes = 0, 0
        for entry in store.all_entries():
            owner = self.lanes.get(entry.lane)
            if owner is not None:
                self._track(owner, entry)
        for config in store.all_configs():
            self._add_config(config)
        for journal, done_id in store.done():
            self.done.setdefault(journal, []).append(done_id)

    def reload(self, store: s.OutboxStore) -> None:
        """Rebuilt from the store, in place (every part of the node holds this book): after a
        write that failed, what the book holds beyond the store goes. Nothing changes if the
        store cannot be read."""
        fresh = Book(self.limits)
        fresh.load(store)
        vars(self).update(vars(fresh))

    def reload_lane(self, store: s.OutboxStore, lane_id: str) -> None:
        """One lane's queue as the store holds it: a write of that lane failed (the book ran
        ahead of the store, or behind it) and every other lane is sound."""
        lane = self.lanes.get(lane_id)
        if lane is None:
            return
        for item in list(self.pending.get(lane_id, ())):
            self._untrack(lane, item)
        self.pending.pop(lane_id, None)
        for entry in store.entries(lane_id):
            self._track(lane, entry)

    # ------------------------------------------------------------------ push configs
    def config(self, task: str, config_id: str) -> PushConfig | None:
        return self.configs.get(task, {}).get(config_id)

    def configs_of(self, task: str) -> list[PushConfig]:
        return list(self.configs.get(task, {}).values())

    def config_room(self, task: str, config_id: str, client: str) -> str | None:
        """Why one more config (not a replacement) is refused, or None."""
        existing = self.configs.get(task, {})
        if config_id in existing:
            return None
        if len(existing) >= self.limits.configs_per_task:
            return f"the task has {len(existing)} push configs, the most this node keeps"
        if self.client_configs.get(client, 0) >= self.limits.configs_per_client:
            return f"token {client!r} has the most push configs this node keeps for one token"
        return None

    def set_config(self, config: PushConfig, now: float) -> list[s.Op]:
        ops = []
        previous = self.config(config.task, config.id)
        if previous is not None:
            self._drop_config(previous)
        self._add_config(config)
        lane_id = push_lane_id(config.task, config.id)
        lane = self.lanes.get(lane_id)
        if lane is None or lane.client != config.client:
            if lane is not None:  # replaced by another token: its old queue goes
                ops += self.close(lane, "replaced", now, drop=True)
            lane = self.lanes[lane_id] = Lane(
                id=lane_id,
                kind=PUSH,
                journal=config.journal,
                subject=config.task,
                target=config.id,
                client=config.client,
            )
        lane.closed, lane.touched = "", now
        return [*ops, s.put_config(config), s.put_lane(lane)]

    def remove_config(self, task: str, config_id: str, now: float) -> list[s.Op]:
        config = self.config(task, config_id)
        if config is None:
            return []
        self._drop_config(config)
        ops = [s.delete_config(task, config_id)]
        lane = self.lanes.get(push_lane_id(task, config_id))
        if lane is not None:
            ops += self.close(lane, "removed", now, drop=True)
        return ops

    def _add_config(self, config: PushConfig) -> None:
        self.configs.setdefault(config.task, {})[config.id] = config
        self.client_configs[config.client] = self.client_configs.get(config.client, 0) + 1

    def _drop_config(self, config: PushConfig) -> None:
        of_task = self.configs.get(config.task, {})
        if of_task.pop(config.id, None) is None:
            return
        if not of_task:
            del self.configs[config.task]
        left = self.client_configs.get(config.client, 1) - 1
        if left > 0:
            self.client_configs[config.client] = left
        else:
            self.client_configs.pop(config.client, None)

    # ------------------------------------------------------------------ lanes and entries
    def lane(self, lane_id: str) -> Lane | None:
        return self.lanes.get(lane_id)

    def open_lane(self, lane_id: str, kind: str, journal: str, subject: str, target: str) -> Lane:
        lane = self.lanes.get(lane_id)
        if lane is None:
            lane = self.lanes[lane_id] = Lane(
                id=lane_id,
                kind=kind,
                journal=journal,
                subject=subject,
                target=target,
                client=target,
            )
        return lane

    def enqueue(self, lane: Lane, entry: Entry, now: float) -> list[s.Op]:
        """Queue `entry` at the end of `lane`, within the limits: past the task's, the oldest
        waiting entry after the head goes (the newer ones say more); past the client's, the
        new entry is dropped. Both are counted as dropped and marked ended."""
        size = len(entry.body)
        ops: list[s.Op] = []
        totals = self.client_totals.setdefault(lane.client, [0, 0])
        limits = self.limits
        if totals[0] + 1 > limits.per_client or totals[1] + size > limits.per_client_bytes:
            lane.dropped += 1
            lane.touched = now
            self.mark_done(entry.journal, entry.id, ops)
            return [*ops, s.put_lane(lane)]
        queue = self.pending.setdefault(lane.id, deque())
        while len(queue) >= 2 and (
            lane.pending + 1 > limits.per_task or lane.pending_bytes + size > limits.per_task_bytes
        ):
            victim = queue[1]
            del queue[1]
            self._untrack(lane, victim)
            lane.dropped += 1
            ops.append(("entries", s.entry_key(lane.id, victim.seq, victim.n), None))
            self.mark_done(victim.journal, victim.entry_id, ops)
        self._track(lane, entry)
        lane.touched = now
        ops += [s.put_entry(entry), s.put_lane(lane)]
        return ops

    def head(self, lane_id: str) -> Pending | None:
        queue = self.pending.get(lane_id)
        return queue[0] if queue else None

    def end_head(self, lane: Lane, entry: Entry, now: float) -> list[s.Op]:
        """The head entry ended (delivered, expired): out of the queue, marked ended."""
        queue = self.pending.get(lane.id)
        if queue and (queue[0].seq, queue[0].n) == (entry.seq, entry.n):
            self._untrack(lane, queue.popleft())
        lane.touched = now
        ops: list[s.Op] = [s.delete_entry(entry)]
        self.mark_done(entry.journal, entry.id, ops)
        ops.append(s.put_lane(lane))
        return ops

    def close(self, lane: Lane, why: str, now: float, *, drop: bool) -> list[s.Op]:
        """Nothing more comes to `lane`; with `drop`, what still waits is dropped too."""
        ops: list[s.Op] = []
        lane.closed, lane.touched = why, now
        if drop:
            queue = self.pending.pop(lane.id, deque())
            for item in queue:
                self._untrack(lane, item)
                lane.dropped += 1
                ops.append(("entries", s.entry_key(lane.id, item.seq, item.n), None))
                self.mark_done(item.journal, item.entry_id, ops)
            lane.due = 0.0
        ops.append(s.put_lane(lane))
        return ops

    def forget_entry(self, lane_id: str, seq: int, n: int) -> list[s.Op]:
        """Another node said this entry ended (delivery.progress): drop it, count nothing."""
        queue = self.pending.get(lane_id)
        lane = self.lanes.get(lane_id)
        if not queue or lane is None:
            return []
        for item in queue:
            if (item.seq, item.n) == (seq, n):
                queue.remove(item)
                self._untrack(lane, item)
                return [("entries", s.entry_key(lane_id, seq, n), None), s.put_lane(lane)]
        return []

    def forget_after(self, journal: str, seq: int) -> list[s.Op]:
        """Entries and configs of `journal` from `seq` on (its envelopes were rewound)."""
        ops: list[s.Op] = []
        for lane in self.lanes.values():
            if lane.journal != journal:
                continue
            for item in [i for i in self.pending.get(lane.id, ()) if i.seq >= seq]:
                ops += self.forget_entry(lane.id, item.seq, item.n)
        for config in [c for t in list(self.configs.values()) for c in t.values()]:
            if config.journal == journal and config.seq >= seq:
                self._drop_config(config)
                ops.append(s.delete_config(config.task, config.id))
        return ops

    def mark_done(self, journal: str, done_id: str, ops: list[s.Op]) -> None:
        self.done.setdefault(journal, []).append(done_id)
        ops.append(s.put_done(journal, done_id))

    def _track(self, lane: Lane, entry: Entry) -> None:
        size = len(entry.body)
        item = Pending(entry.seq, entry.n, size, entry.due, entry.id, entry.journal)
        queue = self.pending.setdefault(lane.id, deque())
        queue.append(item)
        lane.pending += 1
        lane.pending_bytes += size
        totals = self.client_totals.setdefault(lane.client, [0, 0])
        totals[0] += 1
        totals[1] += size

    def _untrack(self, lane: Lane, item: Pending) -> None:
        lane.pending -= 1
        lane.pending_bytes -= item.size
        totals = self.client_totals.get(lane.client)
        if totals is not None:
            totals[0] -= 1
            totals[1] -= item.size
        if not self.pending.get(lane.id):
            self.pending.pop(lane.id, None)

    # ------------------------------------------------------------------ retention
    def sweep(self, retention: float, now: float | None = None) -> list[s.Op]:
        """Closed, empty lanes untouched for `retention` seconds go, with their config."""
        now = time.time() if now is None else now
        ops: list[s.Op] = []
        for lane in list(self.lanes.values()):
            if lane.closed and not lane.pending and now - lane.touched >= retention:
                del self.lanes[lane.id]
                ops.append(s.delete_lane(lane.id))
                if lane.kind == PUSH:
                    config = self.config(lane.subject, lane.target)
                    if config is not None:
                        self._drop_config(config)
                        ops.append(s.delete_config(lane.subject, lane.target))
        return ops

    def pending_count(self, kind: str | None = None) -> int:
        return sum(
            lane.pending for lane in self.lanes.values() if kind is None or lane.kind == kind
        )
