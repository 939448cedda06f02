"""What the journal says about approval requests, acted on by the gate: a resolution releases
its waiting call, a decision recorded while a call now waits is claimed, a canceled task's
requests are denied and an ended task's abandoned (read from the tasks read model's changes,
never from event types), whichever node or client wrote the events."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterable
from typing import Any, Protocol

from eventstore.envelope import Envelope
from node.context import NodeContext
from projections import catalogue as c
from projections.journals import Journals
from projections.states import TaskChanged, TaskState
from projections.tasks import Tasks

log = logging.getLogger(__name__)


class Gate(Protocol):
    """What the follower needs of node/services/approvals.py's ApprovalGate."""

    ctx: NodeContext

    @property
    def closed(self) -> bool: ...
    def waits_for(self, approval_id: str) -> bool: ...
    def resolved(self, approval_id: str, outcome: str) -> None: ...
    async def claim(self, approval_id: str) -> None: ...
    async def abandon(self, ids: Iterable[str], reason: str) -> list[str]: ...
    async def deny_for_task(self, agent: str, task_id: str, operator: str, reason: str) -> int: ...


class ApprovalFollower:
    def __init__(self, gate: Gate) -> None:
        self._gate = gate
        self._background: set[asyncio.Task[None]] = set()

    def on_commit(self, envelopes: list[Envelope]) -> None:
        gate = self._gate
        machine = gate.ctx.projections.get(Tasks)
        for envelope in envelopes:
            for change in machine.changes(envelope):
                if isinstance(change, TaskChanged):
                    if change.ended:
                        self._task_ended(change, envelope)
                elif change.outcome is not None:
                    gate.resolved(change.approval, change.outcome)
                elif change.recorded is not None and gate.waits_for(change.approval):
                    self._spawn(gate.claim(change.approval))

    def cancel(self) -> None:
        for job in list(self._background):
            job.cancel()

    def _task_ended(self, change: TaskChanged, envelope: Envelope) -> None:
        """A canceled task's pending requests can never be performed: deny them, saying why;
        an ended task's are abandoned (no later call of the task can ask for them)."""
        gate, task_id, agent = self._gate, change.task, change.agent
        if gate.closed:
            return
        if gate.ctx.projections.get(Journals).home_of(agent) not in (None, gate.ctx.name):
            return  # a replica: the home node decides
        asked = gate.ctx.projections.get(Tasks).asked_by(agent, task_id)
        if not asked:
            return
        if change.after is not TaskState.CANCELED:
            self._spawn(gate.abandon(asked, f"task {task_id} ended ({change.after.value})"))
            return
        canceled = c.payload_of(envelope)
        operator = canceled.operator if isinstance(canceled, c.TaskCanceled) else None
        by = f" by {operator}" if operator else ""
        reason = f"task {task_id} was canceled{by}"
        self._spawn(gate.deny_for_task(agent, task_id, operator or "node", reason))

    def _spawn(self, work: Coroutine[Any, Any, object]) -> None:
        job = asyncio.get_running_loop().create_task(_logged(work))
        self._background.add(job)
        job.add_done_callback(self._background.discard)


async def _logged(work: Coroutine[Any, Any, object]) -> None:
    try:
        await work
    except Exception:
        log.exception("could not journal an approval the node closes by itself")
