"""Which tasks each hosted agent still has to work on, as its journal says.

A task is deliverable from its creation (in the journal of the agent it is for) until it ends
(projections/states.py decides both; the queue folds the tasks read model's changes), except
while it awaits its client's next message (a multi-turn task whose run ended without ending
it): that message makes it deliverable again, with the message's input. Tasks
that were started but not finished when the node went down are delivered again after a
restart (at least once), in creation order. The queue starts from the tasks read model's open
tasks and then folds the changes of every commit, on the event loop; workers take from it on
their own threads.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable

from node.runtime.hostapi import Task
from projections.states import TaskChanged
from projections.tasks import Task as SpecTask

# a task its agent's worker has to run, or None (projections/tasks.py `deliverable_task`)
Deliverable = Callable[[str], SpecTask | None]


class TaskQueue:
    def __init__(self, agents: Iterable[str]) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, OrderedDict[str, Task]] = {a: OrderedDict() for a in agents}
        self._delivered: set[str] = set()

    def seed(self, agent: str, open_tasks: Iterable[SpecTask]) -> None:
        """Start from the tasks read model's deliverable tasks, oldest first."""
        with self._lock:
            tasks = self._open[agent]
            for task in open_tasks:
                tasks[task.id] = delivered(task)

    def add_agent(self, agent: str, open_tasks: Iterable[SpecTask]) -> None:
        """An agent deployed on the running node, with the deliverable tasks its journal
        holds."""
        with self._lock:
            self._open.setdefault(agent, OrderedDict())
        self.seed(agent, open_tasks)

    def release(self, agent: str, task_ids: Iterable[str]) -> int:
        """Tasks of `agent` handed out but not finished become deliverable again: those of an
        instance a lifecycle swap ended (for the next instance to take over), or a run parked
        while people decided (node/runtime/parking.py), once they have. How many."""
        with self._lock:
            released = self._delivered & set(task_ids) & set(self._open.get(agent, {}))
            self._delivered -= released
        return len(released)

    def apply(self, changes: Iterable[TaskChanged], deliverable: Deliverable) -> list[str]:
        """Fold the tasks read model's changes (`deliverable` reads a task as the worker would
        get it, None when it has nothing to do with it); returns the agents that got a task to
        run (to wake them)."""
        woken: list[str] = []
        with self._lock:
            for change in changes:
                tasks = self._open.get(change.agent)
                if tasks is None:
                    continue
                found = None if change.ended else deliverable(change.task)
                if found is None:  # ended, or its run ended and it awaits its client
                    tasks.pop(change.task, None)
                    self._delivered.discard(change.task)
                elif change.task not in tasks:  # created, or its client's next message came
                    tasks[found.id] = delivered(found)
                    woken.append(change.agent)
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


def delivered(task: SpecTask) -> Task:
    """What the agent's `handle-task` gets: who made the task as the node checked it (the
    token's name, or the creating agent's: then `from` is that agent), and whether `from` is
    only that caller's word."""
    caller = task.created_by if isinstance(task.created_by, str) else task.from_
    return Task(
        task.id, task.from_, json.dumps(task.input or {}), caller, task.from_asserted is True
    )
