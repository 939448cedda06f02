"""AG-UI runs of a hosted agent: what a run does, and the events it streams.

A run with a new user message creates a task from it (the same task the A2A and REST APIs
show; its A2A contextId is the AG-UI threadId) and follows the task to its end. A run without
one runs a tick of the agent now. When the work asks for a gated capability the run ends
with an interrupt (one per approval, `id` = the approval id, bound to the tool call that
shows the request); the next run's `resume` entries are the decisions - "resolved" approves,
"cancelled" denies - made through the ApprovalGate with the caller's token name as operator,
and the run follows the same work on from there.

Resume entries that name no approval of this agent are skipped with a warning (a CUSTOM
event), as AG-UI asks of producers; answering ("resolved") an approval that already timed
out is a stale resume and the run ends at once with RUN_ERROR `INTERRUPT_EXPIRED`;
abandoning it ("cancelled") is fine.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from eventstore.envelope import Envelope
from node.agui.events import Event, RunEvents
from node.agui.input import ResumeEntry, RunInput, last_user_message, text_of
from node.context import NodeContext
from node.protocols.a2a_model import input_from_text
from node.protocols.follow import JournalCursor
from node.protocols.lifecycle import StopSignal
from node.runtime.agents import Agents
from node.services.approval_decisions import Decision
from node.services.approvals import ApprovalGate
from node.services.tasks import TaskService
from node.web import boundedjson
from node.web.http import Problem
from projections import catalogue as c
from projections.approvals import Approvals
from projections.states import ApprovalChanged, TaskChanged, TaskState
from projections.tasks import Tasks

log = logging.getLogger(__name__)
WARNING = "agent-node.warning"
PROGRESS = "agent-node.task_progress"
_FOLLOWED = frozenset({c.ACTION_PERFORMED, c.LOG})  # what a run shows besides task steps
MAX_TICK_WORK = 1000  # ticks kept waiting for a resume; the oldest are forgotten past this


@dataclass
class TaskWork:
    task_id: str


@dataclass
class TickWork:
    future: asyncio.Future[Any]
    logs: list[str] = field(default_factory=list)


Work = TaskWork | TickWork


@dataclass
class ResumePlan:
    decide: list[tuple[str, Decision]] = field(default_factory=list)  # (approval id, decision)
    warnings: list[dict[str, Any]] = field(default_factory=list)
    work: Work | None = None
    expired: list[str] = field(default_factory=list)


class AguiRuns:
    def __init__(
        self, ctx: NodeContext, tasks: TaskService, approvals: ApprovalGate, agents: Agents
    ) -> None:
        self.ctx = ctx
        self.tasks = tasks
        self.approvals = approvals
        self.agents = agents
        # approval id → the on-demand tick blocked on it (ticks are not in the journal)
        self._ticks: dict[str, TickWork] = {}

    async def run(
        self,
        agent: str,
        run: RunInput,
        operator: str,
        stop: StopSignal,
        keepalive: float,
        groups: frozenset[str] = frozenset(),
    ) -> AsyncGenerator[Event | None, None]:
        """The run's events in order; None when `keepalive` passed quietly (ping the client).
        `groups`: the caller's approver groups, for the seats of an N-of-M request it fills."""
        events = RunEvents(run.thread_id, run.run_id, run.parent_run_id)
        results: dict[str, str] = {}  # capability → tool call awaiting its action's result
        if run.resume:
            plan = self._plan_resume(agent, run.resume)
            if plan.expired:
                yield events.error(
                    f"interrupt(s) {', '.join(plan.expired)} expired before they were "
                    "answered; cancel them to continue the thread",
                    "INTERRUPT_EXPIRED",
                )
                return
            yield events.started(agent=agent, kind="resume")
            for warning in plan.warnings:
                yield events.custom(WARNING, warning)
            cursor = JournalCursor.at_head(self.ctx, agent)
            decided, refusal = await self._decide(agent, plan, operator, groups, events, results)
            for event in decided:
                yield event
            if refusal is not None:
                yield events.error(refusal, "APPROVAL_REFUSED")
                return
            work = plan.work
            if work is None:
                yield events.success()
                return
        else:
            yield events.started(agent=agent)
            cursor = JournalCursor.at_head(self.ctx, agent)
            try:
                work = await self._start(agent, run, operator)
            except (Problem, LookupError, RuntimeError) as exc:
                yield events.error(getattr(exc, "detail", None) or str(exc), "NOT_STARTED")
                return
        async for followed in self._follow(agent, work, cursor, events, results, stop, keepalive):
            yield followed

    # ------------------------------------------------------------------ starting
    async def _start(self, agent: str, run: RunInput, operator: str) -> Work:
        message = last_user_message(run)
        if message is not None:
            text = text_of(message)
            record = {
                "messageId": str(message.get("id") or f"{run.run_id}-input"),
                "role": "ROLE_USER",
                "parts": [{"text": text}],
                "contextId": run.thread_id,
            }
            created = await self.tasks.create(
                operator,
                agent,
                input_from_text(text),
                a2a={"contextId": run.thread_id, "message": record},
                caller=operator,
            )
            return TaskWork(created["id"])
        future = asyncio.wrap_future(self.agents.runtime.tick_now(agent, "agui"))
        future.add_done_callback(_retrieve)
        return TickWork(future)

    # ------------------------------------------------------------------ resuming
    def _plan_resume(self, agent: str, entries: list[ResumeEntry]) -> ResumePlan:
        approvals = self.ctx.projections.get(Approvals)
        machine = self.ctx.projections.get(Tasks)
        plan = ResumePlan()
        for entry in entries:
            approval_id = entry.interrupt_id
            pending = approvals.get(approval_id)
            resolved = approvals.resolution(approval_id)
            owner = pending.agent if pending else resolved.agent if resolved else None
            if owner != agent:
                plan.warnings.append(
                    {
                        "code": "UNKNOWN_INTERRUPT",
                        "interruptId": approval_id,
                        "message": f"no interrupt {approval_id} of {agent}; the entry was skipped",
                    }
                )
                continue
            if resolved is not None and resolved.outcome == "timeout":
                if entry.status == "resolved":
                    plan.expired.append(approval_id)
            elif resolved is not None:
                plan.warnings.append(
                    {
                        "code": "ALREADY_DECIDED",
                        "interruptId": approval_id,
                        "message": f"{approval_id} was already decided: "
                        f"{resolved.outcome} by {resolved.operator or 'someone'}",
                    }
                )
            else:
                decision: Decision = "approve" if entry.status == "resolved" else "deny"
                plan.decide.append((approval_id, decision))
            tick = self._ticks.pop(approval_id, None)
            if plan.work is None:
                if tick is not None:
                    plan.work = tick
                elif (task_id := machine.approval_task_of(approval_id)) is not None:
                    plan.work = TaskWork(task_id)
        return plan

    async def _decide(
        self,
        agent: str,
        plan: ResumePlan,
        operator: str,
        groups: frozenset[str],
        events: RunEvents,
        results: dict[str, str],
    ) -> tuple[list[Event], str | None]:
        """The events the decisions make, and why the run ends here when none of them
        counted because each was refused (403: the token fills no open seat; 409: it approved
        already, or the request was abandoned); a CUSTOM warning says it per interrupt."""
        gate = self.approvals
        out: list[Event] = []
        counted, refused = 0, []
        for approval_id, decision in plan.decide:
            request = self.ctx.projections.get(Approvals).get(approval_id)
            try:
                await gate.decide(approval_id, decision, operator, groups=groups)
            except Problem as exc:
                out.append(
                    events.custom(
                        WARNING,
                        {"code": "NOT_DECIDED", "interruptId": approval_id, "message": exc.detail},
                    )
                )
                if exc.status in (403, 409):
                    refused.append(f"{approval_id}: {exc.detail}")
                continue
            counted += 1
            call_id = tool_call_id(approval_id)
            if decision == "deny":
                out.append(events.tool_result(call_id, {"decision": "deny", "by": operator}))
            elif request is not None:
                results[request.capability] = call_id
        if refused and not counted:
            return out, "the resume decided none of its interrupts: " + "; ".join(refused)
        if counted and self.tasks.confirm is not None:
            try:  # acknowledged once the mesh's stream holds it, as the REST API's decisions
                await self.tasks.confirm(agent)
            except Problem as exc:
                return out, f"the decisions are not acknowledged: {exc.detail}"
        return out, None

    # ------------------------------------------------------------------ following
    async def _follow(
        self,
        agent: str,
        work: Work,
        cursor: JournalCursor,
        events: RunEvents,
        results: dict[str, str],
        stop: StopSignal,
        keepalive: float,
    ) -> AsyncIterator[Event | None]:
        loop = asyncio.get_running_loop()
        quiet_since = loop.time()
        while True:
            tick_done = isinstance(work, TickWork) and work.future.done()
            for envelope in cursor.read():
                out, finished = self._events_of(agent, envelope, work, events, results)
                for event in out:
                    yield event
                quiet_since = loop.time()
                if finished:
                    return
            if isinstance(work, TickWork) and tick_done:
                for event in self._tick_end(work, events):
                    yield event
                return
            if isinstance(work, TaskWork):
                ended = self._task_end(work.task_id)  # it ended before this run looked
                if ended is not None:
                    for event in ended(events):
                        yield event
                    return
            if stop.is_set:
                yield events.error(stop.reason, stop.code)
                return
            now = loop.time()
            if now - quiet_since >= keepalive:
                yield None
                quiet_since = now
            also = [stop.future] + ([work.future] if isinstance(work, TickWork) else [])
            await cursor.wait(keepalive - (now - quiet_since), *also)

    def _events_of(
        self,
        agent: str,
        envelope: Envelope,
        work: Work,
        events: RunEvents,
        results: dict[str, str],
    ) -> tuple[list[Event], bool]:
        """What one envelope of the agent's journal means for the run: the tasks read model's
        changes decide every task and approval step (projections/states.py)."""
        machine = self.ctx.projections.get(Tasks)
        changes = machine.changes(envelope)
        for change in changes:
            if (
                isinstance(change, ApprovalChanged)
                and change.requested
                and not self.ctx.projections.get(Approvals).decided_at_once(change.approval)
            ):  # one a policy decided in the same write never interrupts the run
                asked = c.payload_of(envelope)
                if self._asked_by(work, change) and isinstance(asked, c.ApprovalRequested):
                    return self._interrupt(agent, asked, work, events), True
        if not changes:
            payload = c.payload_of(envelope) if envelope.event.type in _FOLLOWED else None
            if isinstance(payload, c.ActionPerformed):
                call_id = results.pop(payload.capability, None)
                if call_id is not None:
                    return [events.tool_result(call_id, envelope.event.data)], False
            elif isinstance(payload, c.Log) and isinstance(work, TickWork):
                work.logs.append(payload.message)
            return [], False
        if isinstance(work, TickWork):
            return [], False
        for change in changes:
            if isinstance(change, TaskChanged) and change.task == work.task_id:
                return self._task_step(change, envelope, events)
        return [], False

    def _task_step(
        self, change: TaskChanged, envelope: Envelope, events: RunEvents
    ) -> tuple[list[Event], bool]:
        payload = c.payload_of(envelope)
        if change.before == change.after and not isinstance(payload, c.TaskAwaiting):
            value = payload.progress if isinstance(payload, c.TaskProgress) else None
            return [events.custom(PROGRESS, {"taskId": change.task, "progress": value})], False
        end = self._task_end(change.task)
        return (end(events), True) if end is not None else ([], False)

    def _task_end(self, task_id: str) -> Callable[[RunEvents], list[Event]] | None:
        """How the run ends if the task is final, or its agent's turn ended and it awaits its
        client (nothing more will come for it in this run: AG-UI has no way to send that task
        another message, A2A does), then with what the agent answered."""
        tasks = self.ctx.projections.get(Tasks)
        if tasks.awaits(task_id):
            said = [t for t in tasks.turns(task_id) if t.get("role") == "agent"]
            reply = said[-1].get("reply", {}) if said else {}
            return lambda e: _completed(e, reply)
        record = tasks.record(task_id)
        if record is None:
            return lambda e: [e.error(f"task {task_id} is gone", "TASK_FAILED")]
        task = record.task
        if record.state is TaskState.CANCELED:
            return lambda e: [e.cancelled()]
        if record.state is TaskState.COMPLETED:
            return lambda e: _completed(e, task.output or {})
        if record.state is TaskState.FAILED:
            return lambda e: [e.error(str(task.error or "the task failed"), "TASK_FAILED")]
        return None

    def _asked_by(self, work: Work, change: ApprovalChanged) -> bool:
        """Whether an approval request comes from this run's work. A worker runs one thing
        at a time, so during an on-demand tick every request is the tick's."""
        if isinstance(work, TickWork):
            return not work.future.done()
        return change.task == work.task_id

    def _interrupt(
        self, agent: str, asked: c.ApprovalRequested, work: Work, events: RunEvents
    ) -> list[Event]:
        approval_id, capability = asked.id, asked.capability or "capability"
        detail = f"{capability}: {asked.request}" if asked.request else asked.detail
        call_id = tool_call_id(approval_id)
        request = self.ctx.projections.get(Approvals).get(approval_id)
        interrupt: dict[str, Any] = {
            "id": approval_id,
            "reason": "approval",
            "message": f"{agent} asks to use {capability}: {_request_text(capability, detail)}",
            "toolCallId": call_id,
            "metadata": {
                "agent": agent,
                "capability": capability,
                "request": _request_text(capability, detail),
                "requestHash": asked.request_hash,
            },
        }
        if request is not None:
            interrupt["expiresAt"] = request.expires_at
        out: list[Event] = []
        if isinstance(work, TickWork):
            self._keep_tick(approval_id, work)
            out += events.text("\n".join(work.logs))
            work.logs = []
        else:
            interrupt["metadata"]["taskId"] = work.task_id
        out += events.tool_call(call_id, capability, _request_args(capability, detail))
        out.append(events.interrupted([interrupt]))
        return out

    def _keep_tick(self, approval_id: str, work: TickWork) -> None:
        while len(self._ticks) >= MAX_TICK_WORK:
            self._ticks.pop(next(iter(self._ticks)))
        self._ticks[approval_id] = work

    def _tick_end(self, work: TickWork, events: RunEvents) -> list[Event]:
        error = work.future.exception()
        if error is not None:
            reason = getattr(getattr(error, "fault", None), "reason", None) or str(error)
            return [events.error(f"the tick failed: {reason}", "TICK_FAILED")]
        return [*events.text("\n".join(work.logs)), events.success()]


def _completed(events: RunEvents, output: dict[str, Any]) -> list[Event]:
    """A finished task: its reply (or its whole output) as the assistant's message."""
    reply = output.get("reply")
    text = reply if isinstance(reply, str) else json.dumps(output)
    return [*events.text(text), events.success(output)]


def tool_call_id(approval_id: str) -> str:
    return f"call-{approval_id}"


def _request_text(capability: str, detail: str) -> str:
    """The request an approval shows: what follows `<capability>: ` in its detail."""
    return detail.removeprefix(f"{capability}: ")


def _request_args(capability: str, detail: str) -> Any:
    raw = _request_text(capability, detail)
    try:
        return boundedjson.loads(raw)
    except ValueError:
        return {"request": raw}


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a tick's failure as seen: a run that ended early must not leave it unretrieved."""
    if not future.cancelled():
        future.exception()


AGUI_RUNS = web.AppKey("agui_runs", AguiRuns)
