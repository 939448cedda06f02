"""Which tasks each hosted agent still has to work on, as its journal says.

A task is deliverable from its `task.created` (in the journal of the agent it is for) until
its `task.completed`, `task.failed` or `task.canceled`. Tasks that were started but not
finished when the node went down are delivered again after a restart (at least once), in
creation order. The queue starts from the tasks read model's open tasks and then folds every
commit, on the event loop; workers take from it on their own threads.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Iterable

from eventstore.envelope import Envelope
from node.runtime.hostapi import Task


class TaskQueue:
    def __init__(self, agents: Iterable[str]) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, OrderedDict[str, Task]] = {a: OrderedDict() for a in agents}
        self._delivered: set[str] = set()

    def seed(self, agent: str, open_tasks: Iterable[tuple[str, str, dict]]) -> None:
        """Start from the tasks read model's open tasks, (id, from, input), oldest first."""
        with self._lock:
            tasks = self._open[agent]
            for task_id, sender, task_input in open_tasks:
                tasks[task_id] = Task(task_id, sender, json.dumps(task_input or {}))

    def add_agent(self, agent: str, open_tasks: Iterable[tuple[str, str, dict]]) -> None:
        """An agent deployed on the running node, with the open tasks its journal holds."""
        with self._lock:
            self._open.setdefault(agent, OrderedDict())
        self.seed(agent, open_tasks)

    def release(self, agent: str, task_ids: Iterable[str]) -> int:
        """Tasks of `agent` whose instance ended in a lifecycle swap before finishing them
        become deliverable again, for the next instance to take over. How many."""
        with self._lock:
            released = self._delivered & set(task_ids) & set(self._open.get(agent, {}))
            self._delivered -= released
        return len(released)

    def apply(self, envelopes: Iterable[Envelope]) -> list[str]:
        """Fold envelopes; returns the agents that got a new task (to wake them)."""
        woken: list[str] = []
        with self._lock:
            for envelope in envelopes:
                tasks = self._open.get(envelope.stream)
                if tasks is None:
                    continue
                data, kind = envelope.event.data, envelope.event.type
                task_id = str(data.get("id", ""))
                if kind == "task.created" and task_id:
                    raw_input = data.get("input", {})
                    tasks[task_id] = Task(
                        task_id,
                        str(data.get("from", "")),
                        json.dumps(raw_input if raw_input is not None else {}),
                    )
                    woken.append(envelope.stream)
                elif kind in ("task.completed", "task.failed", "task.canceled"):
                    tasks.pop(task_id, None)
                    self._delivered.discard(task_id)
        return woken

    def take(self, agent: str) -> Task | None:
        """The oldest open task of `agent` not yet handed out in this process."""
        with self._lock:
            for task in self._open.get(agent, {}).values():
                if task.id not in self._delivered:
                    self._delivered.add(task.id)
                    return task
        return None

    def is_open(self, agent: str, task_id: str) -> bool:
        with self._lock:
            return task_id in self._open.get(agent, {})
