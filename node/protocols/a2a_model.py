"""Node tasks as A2A 1.0 objects (ProtoJSON), and A2A message parts as task input.

One task, two views: the spec's task (status pending/running/completed/failed) and the A2A
task (TASK_STATE_*), both read from the same projections. The mapping:
the one state of projections/states.py named by `a2a_state`: pending → SUBMITTED, running →
WORKING, input_required → INPUT_REQUIRED (an approval its run asked for is pending), completed →
COMPLETED (its output is the artifact "output", one data part), failed → FAILED, canceled →
CANCELED (REST shows it failed).
"""

from __future__ import annotations

from typing import Any

import msgspec

from node.protocols.a2a_params import Message, Part
from node.web import boundedjson
from node.web.jsonrpc import RpcError
from projections.approvals import Approvals
from projections.states import A2A_STATES, TaskState, a2a_state, rest_status
from projections.tasks import Task, Tasks

SUBMITTED = A2A_STATES[TaskState.PENDING]
WORKING = A2A_STATES[TaskState.RUNNING]
INPUT_REQUIRED = A2A_STATES[TaskState.INPUT_REQUIRED]
COMPLETED = A2A_STATES[TaskState.COMPLETED]
FAILED = A2A_STATES[TaskState.FAILED]
CANCELED = A2A_STATES[TaskState.CANCELED]
REJECTED = "TASK_STATE_REJECTED"
AUTH_REQUIRED = "TASK_STATE_AUTH_REQUIRED"
STATES = (SUBMITTED, WORKING, INPUT_REQUIRED, COMPLETED, FAILED, CANCELED, REJECTED, AUTH_REQUIRED)
TERMINAL = frozenset({COMPLETED, FAILED, CANCELED, REJECTED})
INTERRUPTED = frozenset({INPUT_REQUIRED, AUTH_REQUIRED})

# A2A error codes (JSON-RPC binding)
TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002
UNSUPPORTED_OPERATION = -32004
CONTENT_TYPE_NOT_SUPPORTED = -32005
VERSION_NOT_SUPPORTED = -32009


def task_not_found(task_id: str) -> RpcError:
    return RpcError(
        TASK_NOT_FOUND,
        f"task {task_id!r} not found: no such task for this agent",  # A2A: "Task not found"
        reason="TASK_NOT_FOUND",
        taskId=task_id,
    )


class TaskViews:
    """One task as A2A shows it, read from the tasks read model (its state is the one state
    machine's, projections/states.py) and the approvals it waits for."""

    def __init__(self, tasks: Tasks, approvals: Approvals) -> None:
        self.view = tasks
        self.approvals = approvals

    def state(self, task: Task) -> str:
        state = self.view.state_of(task.id)
        return a2a_state(state) if state is not None else SUBMITTED

    def context_id(self, task: Task) -> str:
        return self.context_of_id(task.id)

    def context_of_id(self, task_id: str) -> str:
        """The task's A2A contextId (its own id when it was created without one)."""
        context = self.view.context_of(task_id).get("contextId")
        return context if isinstance(context, str) and context else task_id

    def updated(self, task: Task) -> str:
        """When the task's status last changed (its creation, if the view has nothing)."""
        return self.view.updated_at(task.id) or task.created_at

    def status(self, task: Task) -> dict[str, Any]:
        state = self.state(task)
        status: dict[str, Any] = {
            "state": state,
            "timestamp": self.updated(task),
        }
        said = self._turn_said(task, state)
        text = self._status_text(task, state)
        if said is not None:
            status["message"] = said
        elif text:
            status["message"] = agent_message(task.id, self.context_id(task), state, text)
        return status

    def _turn_said(self, task: Task, state: str) -> dict[str, Any] | None:
        """What the agent said when its turn ended, while the task awaits its client."""
        if state not in (WORKING, INPUT_REQUIRED) or not self.view.awaits(task.id):
            return None
        agent_turns = [t for t in self.view.turns(task.id) if t.get("role") == "agent"]
        if not agent_turns:
            return None
        return self._agent_turn(task.id, self.context_id(task), agent_turns[-1])

    @staticmethod
    def _agent_turn(task_id: str, context_id: str, turn: dict[str, Any]) -> dict[str, Any]:
        key = f"turn-{turn.get('seq')}"
        return agent_message(task_id, context_id, key, turn.get("message"), turn.get("reply"))

    def _status_text(self, task: Task, state: str) -> str | None:
        if state == CANCELED:
            operator = self.view.canceled_by(task.id) or "an operator"
            return f"canceled by {operator}"
        if state == FAILED:
            return task.error if isinstance(task.error, str) else "failed"
        if state == INPUT_REQUIRED:
            return "; ".join(self.approval_text(a) for a in self.view.pending_approvals(task.id))
        return None

    def approval_text(self, approval_id: str) -> str:
        request = self.approvals.get(approval_id)
        if request is None:
            return f"approval {approval_id} is pending"
        text = request.request or request.detail.removeprefix(f"{request.capability}: ")
        hashed = f", {request.request_hash}" if request.request_hash else ""
        return (
            f"waiting for an operator to approve {request.capability} "
            f"(approval {approval_id}{hashed}, expires {request.expires_at}): {text}"
        )

    def to_json(
        self, task: Task, *, history_length: int | None = None, artifacts: bool = True
    ) -> dict[str, Any]:
        context_id = self.context_id(task)
        out: dict[str, Any] = {
            "id": task.id,
            "contextId": context_id,
            "status": self.status(task),
            "metadata": {"from": task.from_, "agent": task.to, "nodeStatus": task.status},
        }
        if artifacts and self.view.state_of(task.id) is TaskState.COMPLETED:
            out["artifacts"] = [output_artifact(task.id, task.output or {})]
        history = self.history(task, context_id)
        if history_length is not None:
            history = history[-history_length:] if history_length > 0 else []
        if history:
            out["history"] = history
        return out

    def as_of(self, task: Task, state: TaskState, timestamp: str) -> dict[str, Any]:
        """The task as it was when it entered `state` at `timestamp` (the journal time of that
        change): what a push notification for that change carries (node/delivery/push.py).
        Only the state, its time and message and the output depend on it; the rest of a task
        never changes."""
        out = self.to_json(task, artifacts=False)
        a2a = a2a_state(state)
        status: dict[str, Any] = {"state": a2a, "timestamp": timestamp}
        text = self._status_text(task, a2a)
        if text:
            status["message"] = agent_message(task.id, out["contextId"], a2a, text)
        out["status"] = status
        out["metadata"] = {**out["metadata"], "nodeStatus": rest_status(state)}
        if state is TaskState.COMPLETED:
            out["artifacts"] = [output_artifact(task.id, task.output or {})]
        return out

    def history(self, task: Task, context_id: str) -> list[dict[str, Any]]:
        """The message that asked for the task, then each turn of a multi-turn task: what the
        agent said when its turn ended, and the client's next message."""
        asked = self.view.context_of(task.id).get("message")
        if not isinstance(asked, dict):  # a task created over the spec's REST API
            asked = user_message(f"{task.id}-input", task.input)
        messages = [{**asked, "taskId": task.id, "contextId": context_id}]
        for turn in self.view.turns(task.id):
            if turn.get("role") == "agent":
                messages.append(self._agent_turn(task.id, context_id, turn))
                continue
            sent = turn.get("message")
            if not isinstance(sent, dict):  # a message that did not come over A2A
                sent = user_message(f"{task.id}-turn-{turn.get('seq')}", turn.get("input"))
            messages.append({**sent, "taskId": task.id, "contextId": context_id})
        return messages


def user_message(message_id: str, data: Any) -> dict[str, Any]:
    return {
        "messageId": message_id,
        "role": "ROLE_USER",
        "parts": [{"data": data, "mediaType": "application/json"}],
    }


def output_artifact(task_id: str, output: dict[str, Any]) -> dict[str, Any]:
    return {
        "artifactId": f"{task_id}-output",
        "name": "output",
        "parts": [{"data": output, "mediaType": "application/json"}],
    }


def agent_message(
    task_id: str, context_id: str, key: str, text: str | None = None, data: Any = None
) -> dict[str, Any]:
    """A message from the agent; its id is derived, so the same status reads the same."""
    parts: list[dict[str, Any]] = []
    if text is not None:
        parts.append({"text": text})
    if data is not None:
        parts.append({"data": data, "mediaType": "application/json"})
    return {
        "messageId": f"{task_id}-{key}",
        "role": "ROLE_AGENT",
        "taskId": task_id,
        "contextId": context_id,
        "parts": parts,
    }


def input_from_parts(parts: list[Part]) -> dict[str, Any]:
    """The task input a message asks for.

    Data parts holding objects are merged; text parts are joined into `text`, or, when the
    message is text only and the text is a JSON object, that object is the input. Files
    (url/raw parts) are refused: agents take JSON.
    """
    if not parts:
        raise RpcError(-32602, "the message has no parts")
    merged: dict[str, Any] = {}
    texts: list[str] = []
    for part in parts:
        if part.text is not None:
            texts.append(part.text)
        elif part.data is not msgspec.UNSET:
            if isinstance(part.data, dict):
                merged.update(part.data)
            else:
                merged.setdefault("data", []).append(part.data)
        else:
            raise RpcError(
                CONTENT_TYPE_NOT_SUPPORTED,
                "agents on this node take text and data parts, not files",
                reason="CONTENT_TYPE_NOT_SUPPORTED",
            )
    text = "\n".join(texts)
    if texts and not merged:
        as_json = _json_object(text)
        return as_json if as_json is not None else {"text": text}
    if texts:
        merged["text"] = text
    return merged


def input_from_text(text: str) -> dict[str, Any]:
    """The same rule for a plain text message (AG-UI's user message)."""
    as_json = _json_object(text)
    return as_json if as_json is not None else {"text": text}


def _json_object(text: str) -> dict[str, Any] | None:
    stripped = text.strip()
    if not stripped.startswith("{"):
        return None
    try:
        value = boundedjson.loads(stripped)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def message_record(message: Message) -> dict[str, Any]:
    """What is journaled with the task as its history: the message in ProtoJSON."""
    record: dict[str, Any] = msgspec.to_builtins(message)
    record.pop("taskId", None)
    return record
