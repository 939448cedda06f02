"""A2A task operations for one hosted agent, on the node's task service and approval gate.

SendMessage creates a task through the same TaskService as POST /api/v1/a2a/tasks (the
caller's token name is `from`); a message to an input-required task answers its approval
("approve" or "deny"), decided through the ApprovalGate like any operator decision.
CancelTask journals `task.canceled` and denies the approvals the task waits for, so nothing
it asked for can still be approved. Updates are read from the agent's journal as it grows.
"""

from __future__ import annotations

import asyncio
import builtins
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any

from aiohttp import web

from eventstore.envelope import Envelope
from eventstore.store import NewEvent
from node.context import NodeContext
from node.protocols import a2a_model as m
from node.protocols.a2a_pages import tasks_page
from node.protocols.a2a_params import ListTasksParams, Message, SendParams
from node.protocols.follow import JournalCursor
from node.protocols.lifecycle import StopSignal
from node.services.approval_decisions import Decision
from node.services.approvals import ApprovalGate
from node.services.tasks import TaskService
from node.web.http import Problem
from node.web.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, RpcError
from projections import catalogue as c
from projections.approvals import Approvals
from projections.states import ApprovalChanged, TaskChanged, TaskState, a2a_state
from projections.tasks import Task, Tasks

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 100
DECISIONS: dict[str, Decision] = {
    "approve": "approve",
    "approved": "approve",
    "yes": "approve",
    "deny": "deny",
    "denied": "deny",
    "no": "deny",
    "reject": "deny",
}

Update = dict[str, Any]  # one StreamResponse: {"task"|"statusUpdate"|"artifactUpdate": ...}
# What an update does to a stream following the task: nothing, ends it (the task is final), or
# ends the agent's turn (the task awaits its client's next message: a send's stream ends).
GOES_ON, FINAL, TURN_ENDS = "", "final", "turn"
Step = tuple[Update, str]


class A2AService:
    def __init__(self, ctx: NodeContext, tasks: TaskService, approvals: ApprovalGate) -> None:
        self.ctx = ctx
        self.tasks = tasks
        self.approvals = approvals
        p = ctx.projections
        self.views = m.TaskViews(p.get(Tasks), p.get(Approvals))

    # ------------------------------------------------------------------ reads
    def get(self, agent: str, task_id: str) -> Task:
        task = self.ctx.projections.get(Tasks).get(task_id)
        if task is None or task.to != agent:
            raise m.task_not_found(task_id)
        return task

    def task_json(
        self, agent: str, task_id: str, history_length: int | None = None
    ) -> dict[str, Any]:
        _check_history_length(history_length)
        return self.views.to_json(self.get(agent, task_id), history_length=history_length)

    def list(self, agent: str, params: ListTasksParams) -> dict[str, Any]:
        views = self.views
        state = params.status if params.status != "TASK_STATE_UNSPECIFIED" else ""
        if state and state not in m.STATES:
            raise RpcError(INVALID_PARAMS, f"status must be one of {', '.join(m.STATES)}")
        size = DEFAULT_PAGE_SIZE if params.page_size is None else params.page_size
        if not 1 <= size <= MAX_PAGE_SIZE:
            raise RpcError(INVALID_PARAMS, f"pageSize must be 1..{MAX_PAGE_SIZE}")
        _check_history_length(params.history_length)
        after = _timestamp(params.status_timestamp_after) if params.status_timestamp_after else None
        start = _page_token(params.page_token)
        # filtered on what the index of changes holds (in the order tasks last changed, no
        # task decoded), then only the page's tasks are read: about a REST page's cost
        read_model = self.ctx.projections.get(Tasks)
        found = [
            t
            for t in read_model.listing(agent)
            if (not state or a2a_state(t.state) == state)
            and (after is None or _timestamp(t.updated_at) >= after)
            and (not params.context_id or views.context_of_id(t.id) == params.context_id)
        ]
        served = (read_model.get(t.id) for t in found[start : start + size])
        page, _ = tasks_page(  # bounded in bytes too, large parts left out (a2a_pages.py)
            (
                views.to_json(
                    t, history_length=params.history_length, artifacts=params.include_artifacts
                )
                for t in served
                if t is not None
            ),
            self.ctx.config.node.page_max_kb * 1024,
        )
        next_start = start + len(page)
        return {
            "tasks": page,
            "nextPageToken": str(next_start) if next_start < len(found) else "",
            "pageSize": size,
            "totalSize": len(found),
        }

    # ------------------------------------------------------------------ commands
    async def send(
        self,
        agent: str,
        params: SendParams,
        operator: str,
        preceded_by: Callable[[str], builtins.list[NewEvent]] | None = None,
        groups: frozenset[str] = frozenset(),
    ) -> tuple[Task, JournalCursor]:
        """A new task (or the answer to an input-required one), and a cursor placed before
        everything that happens to it next. `preceded_by`: events journaled with a new task,
        before it (its push notification config); `groups`: the caller's approver groups."""
        _check_history_length(params.configuration.history_length)
        message = params.message
        if message.task_id:
            if preceded_by is not None:
                raise RpcError(
                    INVALID_PARAMS,
                    "a push notification config comes with a message that starts a task; "
                    "for an existing task use CreateTaskPushNotificationConfig",
                )
            return await self._answer(agent, message, operator, groups)
        task_input = m.input_from_parts(message.parts)
        context_id = message.context_id or str(uuid.uuid4())
        record = {**m.message_record(message), "contextId": context_id}
        cursor = JournalCursor.at_head(self.ctx, agent)
        try:
            created = await self.tasks.create(
                operator,
                agent,
                task_input,
                a2a={"contextId": context_id, "message": record},
                caller=operator,
                preceded_by=preceded_by,
            )
        except Problem as exc:
            raise _rpc_error(exc) from None
        return self.get(agent, created["id"]), cursor

    async def _answer(
        self, agent: str, message: Message, operator: str, groups: frozenset[str]
    ) -> tuple[Task, JournalCursor]:
        """A message to an existing task: the next turn of a task that awaits its client, or
        the decision on the approvals an input-required task waits for."""
        task = self.get(agent, message.task_id)
        context_id = self.views.context_id(task)
        if message.context_id and message.context_id != context_id:
            raise RpcError(  # A2A 1.0 §3.4.3: a mismatching contextId is rejected
                INVALID_PARAMS,
                f"contextId {message.context_id[:100]!r} is not task {task.id}'s ({context_id})",
            )
        state = self.views.state(task)
        if state not in m.TERMINAL and self.views.view.awaits(task.id):
            return await self._next_turn(agent, task, message, context_id, operator)
        if state != m.INPUT_REQUIRED:
            raise RpcError(
                m.UNSUPPORTED_OPERATION,
                f"task {task.id} is {state}: it takes a message only while it is input-required "
                "or its agent awaits the next message",
                reason="UNSUPPORTED_OPERATION",
                taskId=task.id,
            )
        decision = _decision(message)
        if decision is None:
            raise RpcError(
                INVALID_PARAMS,
                'answer an input-required task with "approve" or '
                '"deny" (a text part, or a data part {"decision": ...})',
            )
        cursor = JournalCursor.at_head(self.ctx, agent)
        await self._decide_all(task.id, decision, operator, groups)
        return self.get(agent, task.id), cursor

    async def _next_turn(
        self, agent: str, task: Task, message: Message, context_id: str, operator: str
    ) -> tuple[Task, JournalCursor]:
        task_input = m.input_from_parts(message.parts)
        record = {**m.message_record(message), "contextId": context_id}
        cursor = JournalCursor.at_head(self.ctx, agent)
        try:
            await self.tasks.message(task.id, task_input, record, operator)
        except Problem as exc:
            raise _rpc_error(exc) from None
        return self.get(agent, task.id), cursor

    async def cancel(self, agent: str, task_id: str, operator: str) -> dict[str, Any]:
        self._not_terminal(self.get(agent, task_id), m.TASK_NOT_CANCELABLE, "TASK_NOT_CANCELABLE")
        try:
            await self.tasks.cancel(task_id, operator)
        except Problem as exc:
            raise RpcError(
                m.TASK_NOT_CANCELABLE, exc.detail, reason="TASK_NOT_CANCELABLE", taskId=task_id
            ) from None
        await self._deny_canceled(agent, task_id, operator)
        return self.views.to_json(self.get(agent, task_id))

    async def _deny_canceled(self, agent: str, task_id: str, operator: str) -> None:
        """Deny, with the reason, what the canceled task asked for (Tasks.asked_by)."""
        reason = f"task {task_id} was canceled by {operator}"
        await self.approvals.deny_for_task(agent, task_id, operator, reason)

    async def _decide_all(
        self, task_id: str, decision: Decision, operator: str, groups: frozenset[str]
    ) -> None:
        """Decide every approval the task waits for. When none counted because each was
        refused (403: the token fills no open seat; 409: it approved already, or the request
        was abandoned), the client learns which and why; one that was decided or timed out
        meanwhile (404) is no refusal."""
        gate = self.approvals
        counted, refused = 0, []
        for approval_id in self.views.view.pending_approvals(task_id):
            try:
                await gate.decide(approval_id, decision, operator, groups=groups)
            except Problem as exc:
                if exc.status in (403, 409):
                    refused.append((approval_id, exc))
                continue
            counted += 1
        if refused and not counted:
            raise _refused(task_id, refused)
        task = self.ctx.projections.get(Tasks).get(task_id)
        if counted and task is not None and self.tasks.confirm is not None:
            try:  # acknowledged once the mesh's stream holds it, as the REST API's decisions
                await self.tasks.confirm(task.to)
            except Problem as exc:
                raise _rpc_error(exc) from None

    # ------------------------------------------------------------------ streams
    def submitted(self, task: Task) -> Update:
        """The task as it was created: the first event of SendStreamingMessage."""
        views = self.views
        body = views.to_json(task, artifacts=False)
        body["status"] = {"state": m.SUBMITTED, "timestamp": task.created_at}
        return {"task": body}

    def snapshot(self, agent: str, task_id: str) -> tuple[Update, JournalCursor]:
        """SubscribeToTask's first event (the task now) and a cursor at the same moment."""
        task = self.get(agent, task_id)
        why = ": there is nothing left to follow"
        self._not_terminal(task, m.UNSUPPORTED_OPERATION, "UNSUPPORTED_OPERATION", why)
        return {"task": self.views.to_json(task)}, JournalCursor.at_head(self.ctx, agent)

    def _not_terminal(self, task: Task, code: int, reason: str, why: str = "") -> None:
        """The A2A error `code` (named `reason`) when the task has ended."""
        state = self.views.state(task)
        if state in m.TERMINAL:
            raise RpcError(code, f"task {task.id} is {state}{why}", reason=reason, taskId=task.id)

    async def updates(
        self,
        task_id: str,
        cursor: JournalCursor,
        stop: StopSignal,
        *,
        end_on_input_required: bool,
        keepalive: float,
        deadline: float | None = None,
    ) -> AsyncIterator[Update | None]:
        """Status and artifact updates of one task as its journal grows, until it is final
        (or, when asked, input-required or awaiting its client's next message). None is
        yielded when `keepalive` passes quietly, so the caller can ping; the iteration also
        ends on node shutdown or at `deadline`."""
        loop = asyncio.get_running_loop()
        quiet_since = loop.time()
        while not stop.is_set:
            for envelope in cursor.read():
                for update, end in self._updates_of(envelope, task_id):
                    yield update
                    quiet_since = loop.time()
                    interrupted = end == TURN_ENDS or _state_of(update) == m.INPUT_REQUIRED
                    if end == FINAL or (end_on_input_required and interrupted):
                        return
            now = loop.time()
            if deadline is not None and now >= deadline:
                return
            if now - quiet_since >= keepalive:
                yield None
                quiet_since = now
            wait = keepalive - (now - quiet_since)
            if deadline is not None:
                wait = min(wait, deadline - now)
            await cursor.wait(wait, stop.future)

    def _updates_of(self, envelope: Envelope, task_id: str) -> builtins.list[Step]:
        """The task's updates for what the envelope changed (projections/states.py)."""
        views = self.views
        changes = views.view.changes(envelope)
        task = views.view.get(task_id) if changes else None
        if task is None:
            return []
        context_id = views.context_id(task)
        ts, payload = envelope.event.ts, c.payload_of(envelope)

        def status(state: str, text: str | None = None, data_: Any = None, key: str = "") -> Update:
            body: dict[str, Any] = {"state": state, "timestamp": ts}
            if text is not None or data_ is not None:
                body["message"] = m.agent_message(
                    task_id, context_id, key or f"{envelope.seq}", text, data_
                )
            return {"statusUpdate": {"taskId": task_id, "contextId": context_id, "status": body}}

        waiting = [ch.after for ch in views.view.task_changes(envelope) if ch.task == task_id]
        out: builtins.list[Step] = []
        for change in changes:
            if isinstance(change, ApprovalChanged):
                if change.task != task_id or (not change.requested and change.outcome is None):
                    continue
                approval = change.approval
                if change.requested and views.approvals.decided_at_once(approval):
                    continue  # a policy decided it in the same write: no input was required
                if change.requested:
                    out.append(
                        (
                            status(
                                m.INPUT_REQUIRED,
                                self._asking(approval, payload),
                                key=f"approval-{approval}",
                            ),
                            GOES_ON,
                        )
                    )
                    continue
                resolution = views.approvals.resolution(approval)
                by = f" by {resolution.operator}" if resolution and resolution.operator else ""
                state = a2a_state(waiting[0]) if waiting else m.INPUT_REQUIRED
                text = f"approval {approval}: {change.outcome}{by}"
                out.append((status(state, text, key=f"decided-{approval}"), GOES_ON))
            elif change.task == task_id:
                out.extend(self._task_update(change, task, envelope, context_id, status))
        return out

    def _asking(self, approval_id: str, payload: c.Payload | None) -> str:
        if self.views.approvals.get(approval_id) is not None or not isinstance(
            payload, c.ApprovalRequested
        ):
            return self.views.approval_text(approval_id)
        return f"waiting for an operator to approve {payload.capability}: {payload.detail}"

    @staticmethod
    def _task_update(
        change: TaskChanged, task: Task, envelope: Envelope, context_id: str, status: Any
    ) -> builtins.list[Step]:
        before, after, payload = change.before, change.after, c.payload_of(envelope)
        if isinstance(payload, c.TaskAwaiting):  # the agent's turn ended; it says why
            said = status(
                a2a_state(after), payload.message, payload.reply, key=f"turn-{envelope.seq}"
            )
            return [(said, TURN_ENDS)]
        if isinstance(payload, c.TaskMessage):  # the client's next message: it works again
            return [(status(m.WORKING), GOES_ON)]
        if before is None or {before, after} == {TaskState.RUNNING, TaskState.INPUT_REQUIRED}:
            return []  # created (the first event shows it), or said by the approval's update
        if before == after:  # it reported progress
            progress = payload.progress if isinstance(payload, c.TaskProgress) else None
            return [
                (status(a2a_state(after), data_=progress, key=f"progress-{envelope.seq}"), GOES_ON)
            ]
        if after is TaskState.RUNNING:
            return [(status(m.WORKING), GOES_ON)]
        if after is TaskState.CANCELED:
            operator = payload.operator if isinstance(payload, c.TaskCanceled) else None
            text = f"canceled by {operator or 'an operator'}"
            return [(status(m.CANCELED, text, key="canceled"), FINAL)]
        if after is TaskState.COMPLETED:
            artifact = {
                "artifactUpdate": {
                    "taskId": task.id,
                    "contextId": context_id,
                    "artifact": m.output_artifact(task.id, task.output or {}),
                    "lastChunk": True,
                }
            }
            return [(artifact, GOES_ON), (status(m.COMPLETED), FINAL)]
        error = task.error if isinstance(task.error, str) and task.error else "failed"
        return [(status(m.FAILED, error, key="failed"), FINAL)]


def _state_of(update: Update) -> str | None:
    state = update.get("statusUpdate", {}).get("status", {}).get("state")
    return state if isinstance(state, str) else None


def _decision(message: Message) -> Decision | None:
    for part in message.parts:
        value: Any = part.text
        if value is None and isinstance(part.data, dict):
            value = part.data.get("decision")
        if isinstance(value, str) and value.strip().lower() in DECISIONS:
            return DECISIONS[value.strip().lower()]
    return None


def _check_history_length(value: int | None) -> None:
    if value is not None and value < 0:
        raise RpcError(INVALID_PARAMS, "historyLength must not be negative")


def _page_token(token: str) -> int:
    if not token:
        return 0
    if not token.isascii() or not token.isdigit() or len(token) > 18:
        raise RpcError(INVALID_PARAMS, "pageToken is not one this node issued")
    return int(token)


def _timestamp(value: str) -> datetime:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise RpcError(INVALID_PARAMS, f"not an RFC 3339 timestamp: {value!r}") from None


def _refused(task_id: str, refused: builtins.list[tuple[str, Problem]]) -> RpcError:
    """The answer decided nothing: -32004 (what a 409 maps to here), reason
    APPROVAL_REFUSED, each refused approval with its status and why."""
    why = "; ".join(f"{approval_id}: {exc.detail}" for approval_id, exc in refused)
    return RpcError(
        m.UNSUPPORTED_OPERATION,
        f"the answer decided none of the approvals task {task_id} waits for: {why}",
        reason="APPROVAL_REFUSED",
        taskId=task_id,
        approvals=",".join(approval_id for approval_id, _ in refused),
        status=",".join(str(exc.status) for _, exc in refused),
    )


def _rpc_error(exc: Problem) -> RpcError:
    if exc.status == 409:
        return RpcError(m.UNSUPPORTED_OPERATION, exc.detail, reason="UNSUPPORTED_OPERATION")
    if exc.status == 413:
        return RpcError(INVALID_PARAMS, exc.detail)
    return RpcError(INTERNAL_ERROR, exc.detail)


A2A = web.AppKey("a2a", A2AService)
