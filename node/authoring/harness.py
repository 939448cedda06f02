"""`agent test`: one agent in the node's real runtime (wasmtime engine, worker thread, fuel,
deadlines, memory limits) with an in-memory host whose grants, secrets and approvals are
given on the command line, for a few ticks, one task and one MCP tool call.

Nothing is journaled and nothing leaves the process: capabilities answer with canned replies
(`{"status": "recorded"}`, as a node without an action URL does), approvals are decided by
the flags, inference answers a fixed text. Values the agent read with `get-secret` are
redacted from what is shown, as the node redacts them from its journal.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from node.inference import canned
from node.runtime import AgentRuntime, AgentSpec, HostError, RuntimeOptions, Task
from node.runtime.memhost import MemoryHost
from node.runtime.redact import SecretRedactor
from projections import catalogue as c

RECORDED = '{"status": "recorded"}'
DECISIONS = ("approve", "deny", "timeout")
NEVER_MS = 24 * 3600 * 1000  # no tick and no restart but the ones asked for
TASK_ID = "task-1"


@dataclass
class Fakes:
    """What the node and its operators would decide, fixed in advance."""

    capabilities: dict[str, str] = field(default_factory=dict)  # capability -> reply (JSON)
    gates: dict[str, str] = field(default_factory=dict)  # capability -> approve|deny|timeout
    grants: set[str] = field(default_factory=set)  # secret domains granted
    secrets: dict[tuple[str, str], str] = field(default_factory=dict)
    state: dict[str, str] = field(default_factory=dict)
    infer_reply: str = "ok"
    infer_answers: list[Any] | None = (
        None  # --infer-file: answers in order (node/inference/canned.py)
    )


@dataclass
class Plan:
    """What to run: ticks first (the node ticks an agent as soon as it loads), then one task,
    then one tool call."""

    ticks: int = 1
    task_input: str | None = None
    task_from: str = "operator"
    tool: str | None = None
    tool_arguments: str = "{}"
    fuel_per_tick: int | None = None
    tick_timeout_ms: int = 10_000
    memory_limit_mb: int | None = None
    load_timeout_s: float = 600.0  # a cold compile of a JS agent takes tens of seconds


@dataclass
class KitHost(MemoryHost):
    """MemoryHost with canned capability replies, every outcome recorded, and redaction."""

    replies: dict[str, str] = field(default_factory=dict)
    answers: list[Any] | None = None
    answered: int = 0
    redactor: SecretRedactor = field(default_factory=SecretRedactor)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def record(self, type_: str, **data: Any) -> None:
        super().record(type_, **self.redactor.value(data))
        with self.changed:
            self.changed.notify_all()

    def wait_for(self, predicate: Callable[[], Any], timeout: float) -> bool:
        with self.changed:
            return bool(self.changed.wait_for(predicate, timeout))

    def invoke(self, capability: str, request: str) -> str:
        try:
            if capability not in self.capabilities:
                raise HostError("not-permitted", f"capability {capability} is not enabled")
            if capability in self.gated:
                decision = self.decide(capability, request)
                self.record("approval", capability=capability, decision=decision)
                if decision == "deny":
                    raise HostError("approval-denied", f"{capability} denied by operator")
                if decision == "timeout":
                    raise HostError("approval-timeout", f"no decision on {capability}")
            reply = self.replies.get(capability, RECORDED)
        except HostError as exc:
            self.record("invoke", capability=capability, request=request, error=str(exc))
            raise
        self.record("invoke", capability=capability, request=request, result=reply)
        return reply

    def infer(self, request: str) -> str:
        if self.answers is None:
            return super().infer(request)
        try:
            if self.answered >= len(self.answers):
                raise canned.exhausted(len(self.answers))
            reply = canned.answer_of(request, self.answers[self.answered])
            self.answered += 1
        except HostError as exc:
            self.record("inference", request=request, error=str(exc))
            raise
        self.record("inference", request=request)
        return reply

    def get_secret(self, domain: str, key: str) -> str:
        try:
            if domain not in self.granted:
                raise HostError("not-permitted", f"no active grant for {domain}")
            value = self.secrets.get((domain, key))
            if value is None:
                raise HostError("failed", f"no secret {domain}/{key}")
        except HostError as exc:
            self.record("secret", domain=domain, key=key, error=str(exc))
            raise
        self.redactor.learn(domain, key, value)
        self.record("secret", domain=domain, key=key)
        return value

    def state_set(self, key: str, value: str) -> None:
        super().state_set(key, self.redactor.text(value))

    def redact(self, text: str) -> str:
        return self.redactor.text(text)


def run(
    component: Path, name: str, fakes: Fakes, plan: Plan, cache_dir: Path | None
) -> dict[str, Any]:
    """Run the plan; the report (JSON-ready) says what happened, `ok` whether all went well."""
    host = KitHost(
        name,
        capabilities=set(fakes.capabilities) | set(fakes.gates),
        gated=set(fakes.gates),
        decide=lambda capability, request: fakes.gates[capability],
        secrets=dict(fakes.secrets),
        granted=set(fakes.grants),
        infer_reply=fakes.infer_reply,
        state=dict(fakes.state),
        replies=dict(fakes.capabilities),
        answers=fakes.infer_answers,
    )
    spec = AgentSpec(
        name,
        component,
        tick_interval_ms=NEVER_MS,
        fuel_per_tick=plan.fuel_per_tick,
        memory_limit_mb=plan.memory_limit_mb,
        tick_timeout_ms=plan.tick_timeout_ms,
        mcp=True,
    )
    options = RuntimeOptions(cache_dir=cache_dir, restart_backoff_ms=NEVER_MS)
    runtime = AgentRuntime([spec], lambda spec, stopping: (host, host), options)
    report: dict[str, Any] = {
        "agent": name,
        "component": str(component),
        "task": None,  # set when a task was given
        "tools": None,  # the MCP tools, once the agent got that far
        "tool": None,  # set when a tool call was given
    }
    runtime.start()
    try:
        _drive(runtime, host, name, plan, report)
    finally:
        runtime.stop(timeout=15)
    worker_load = runtime.workers[name].load_seconds
    report["load_seconds"] = None if worker_load is None else round(worker_load, 3)
    report["events"] = [_shown(type_, data) for type_, data in host.events if type_ in SHOWN]
    report["state"] = dict(host.state)
    faults = host.of_type(c.AgentErrored.type)
    report["fault"] = {"kind": faults[0]["kind"], "error": faults[0]["error"]} if faults else None
    report["ok"] = (
        not faults
        and (report["task"] is None or report["task"]["status"] == "completed")
        and (report["tool"] is None or report["tool"]["ok"])
    )
    return report


def _drive(
    runtime: AgentRuntime, host: KitHost, name: str, plan: Plan, report: dict[str, Any]
) -> None:
    def faulted() -> bool:
        return bool(host.of_type(c.AgentErrored.type))

    def runs(kind: str) -> int:
        return sum(1 for r in host.of_type("run.finished") if r["kind"] == kind)

    if not host.wait_for(lambda: faulted() or runs("tick") >= 1, plan.load_timeout_s):
        raise TimeoutError(f"the agent did not load and tick within {plan.load_timeout_s:g} s")
    for _ in range(plan.ticks - 1):
        if faulted():
            return
        try:
            runtime.tick_now(name, "").result(timeout=plan.tick_timeout_ms / 1000 + 30)
        except Exception:
            return  # the fault is in the events
    if faulted():
        return
    if plan.task_input is not None:
        report["task"] = _task(runtime, host, name, plan)
        if faulted():
            return
    report["tools"] = _tools(runtime, name)
    if plan.tool is not None and not faulted():
        report["tool"] = _tool(runtime, name, plan.tool, plan.tool_arguments)


def _task(runtime: AgentRuntime, host: KitHost, name: str, plan: Plan) -> dict[str, Any]:
    assert plan.task_input is not None
    # as a task the `--from` token made itself (`caller`, WIT 0.2.0): not an asserted `from`
    host.tasks.append(Task(TASK_ID, plan.task_from, plan.task_input, caller=plan.task_from))
    runtime.notify_task(name)

    def ended() -> list[tuple[str, dict[str, Any]]]:
        return [
            (t, d)
            for t, d in list(host.events)
            if t in (c.TaskCompleted.type, c.TaskFailed.type) and d["id"] == TASK_ID
        ]

    wait_s = plan.tick_timeout_ms / 1000 + 30
    host.wait_for(lambda: ended() or host.of_type(c.AgentErrored.type), wait_s)
    task: dict[str, Any] = {"id": TASK_ID, "from": plan.task_from, "input": _json(plan.task_input)}
    outcome = ended()
    if not outcome:
        why = (
            "the agent faulted" if host.of_type(c.AgentErrored.type) else f"no end in {wait_s:g} s"
        )
        return {**task, "status": "failed", "error": why}
    kind, data = outcome[0]
    if kind == c.TaskCompleted.type:
        return {**task, "status": "completed", "output": _json(data["output"])}
    return {**task, "status": "failed", "error": data["error"]}


def _tools(runtime: AgentRuntime, name: str) -> list[dict[str, Any]] | None:
    try:
        tools = asyncio.run(runtime.list_tools(name))
    except Exception:
        return None  # a trap: in the events
    return [
        {"name": t.name, "description": t.description, "input_schema": _json(t.input_schema)}
        for t in tools
    ]


def _tool(runtime: AgentRuntime, name: str, tool: str, arguments: str) -> dict[str, Any]:
    called: dict[str, Any] = {"name": tool, "arguments": _json(arguments)}
    try:
        result = asyncio.run(runtime.call_tool(name, tool, arguments))
    except ValueError as exc:
        return {**called, "ok": False, "result": f"arguments are not JSON: {exc}"}
    except Exception as exc:
        return {**called, "ok": False, "result": f"the agent faulted: {exc}"}
    shown = _json(result.text)
    if result.content and isinstance(shown, list):  # world 0.3.0's content items
        texts = [i.get("text") for i in shown if isinstance(i, dict) and i.get("type") == "text"]
        if len(texts) == len(shown) == 1:  # one text item reads as call-tool's text did
            shown = _json(str(texts[0]))
    return {**called, "ok": result.ok, "result": shown}


def _json(text: str) -> Any:
    """JSON text as its value (readable in the report); anything else as the text itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


SHOWN = {
    "run.started": lambda d: {"kind": d["kind"], "detail": d["detail"]},
    "run.finished": lambda d: {
        "kind": d["kind"],
        "duration_ms": d["duration_ms"],
        "fuel": d["fuel"],
        "error": d["error"],
    },
    "log": lambda d: {"level": d["level"], "message": d["message"]},
    "output": lambda d: {"stream": d["stream"], "line": d["line"]},
    "finding": lambda d: {"severity": d["severity"], "title": d["title"], "detail": d["detail"]},
    "approval": lambda d: {"capability": d["capability"], "decision": d["decision"]},
    "invoke": lambda d: {
        "capability": d["capability"],
        "request": _json(d["request"]),
        **({"error": d["error"]} if "error" in d else {"result": _json(d["result"])}),
    },
    "secret": lambda d: {"domain": d["domain"], "key": d["key"], **_only(d, "error")},
    "inference": lambda d: {"request": _json(d["request"]), **_only(d, "error")},
    c.TaskCreated.type: lambda d: {"id": d["id"], "to": d["to"], "input": _json(d["input"])},
    c.TaskProgress.type: lambda d: {"id": d["id"], "progress": _json(d["progress"])},
    c.StateSet.type: lambda d: {"key": d["key"], "value": d["value"]},
    c.AgentErrored.type: lambda d: {"kind": d["kind"], "error": d["error"]},
}


def _only(data: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: data[k] for k in keys if k in data}


def _shown(type_: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"type": type_, **SHOWN[type_](data)}
