"""The worker's queue of tasks, folded from the tasks read model's changes as they commit: a
multi-turn task leaves it while it awaits its client and comes back with the client's message."""

from __future__ import annotations

import json

from node.runtime.tasks import TaskQueue
from projections.tasks import Tasks
from tests.projections.envelopes import Journal, fold


class Live:
    """A journal folded one event at a time, each event's changes applied to the queue, as
    the runtime's commit listener does."""

    def __init__(self) -> None:
        self.journal, self.tasks, self.queue = Journal(), Tasks(), TaskQueue(["alice"])
        self.woken: list[str] = []

    def add(self, type_: str, data: dict) -> None:
        one = self.journal.add("alice", type_, data)
        fold(self.tasks, [one])
        changes = self.tasks.task_changes(one)
        self.woken += self.queue.apply(changes, self.tasks.deliverable_task)


def test_an_awaiting_task_leaves_the_queue_and_its_next_message_brings_it_back() -> None:
    live = Live()
    live.add("task.created", {"id": "t1", "from": "boss", "input": {"text": "hi"}})
    assert live.woken == ["alice"]
    first = live.queue.take("alice")
    assert first is not None and json.loads(first.input) == {"text": "hi"}
    assert live.queue.take("alice") is None  # handed out once
    live.add("task.started", {"id": "t1"})
    live.add("task.progress", {"id": "t1", "progress": 1})
    assert live.queue.is_open("alice", "t1")
    live.add("task.awaiting", {"id": "t1"})
    assert not live.queue.is_open("alice", "t1") and live.queue.take("alice") is None
    live.add("task.message", {"id": "t1", "input": {"text": "more"}})
    assert live.woken == ["alice", "alice"]
    again = live.queue.take("alice")
    assert again is not None and (again.id, json.loads(again.input)) == ("t1", {"text": "more"})
    live.add("task.completed", {"id": "t1", "output": {}})
    assert not live.queue.is_open("alice", "t1")
    # a restart seeds the queue with what the read model says is deliverable: nothing here
    restarted = TaskQueue(["alice"])
    restarted.seed("alice", live.tasks.deliverable("alice"))
    assert restarted.take("alice") is None
