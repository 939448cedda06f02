"""Which version of the agent world (wit/agent.wit, wit/0.2.0/agent.wit, wit/0.3.0/agent.wit) a
component targets, read from the component itself, so components built against any of them
keep working.

The host functions are the same in every version, so the linker offers each version's `host`
instance (node/runtime/bindings.py); what differs is the task record `handle-task` takes:
0.2.0 adds who made the task (`caller`) and whether `from` is only that caller's word
(`from-asserted`). The record handed to a component has exactly the fields its own export
declares. 0.3.0 adds optional MCP exports (prompts, completion, resources, content items), which
the node looks up by name whatever the version (node/runtime/instance.py, mcp_exports.py).
"""

from __future__ import annotations

from typing import Any

import wasmtime
from wasmtime import component as cm

from node.runtime.hostapi import Task

PACKAGE = "agent-runtime:agent/"
VERSIONS = ("0.1.0", "0.2.0", "0.3.0")


def world_version(component: cm.Component, engine: wasmtime.Engine) -> str | None:
    """The version of the agent package the component imports (None: it imports none)."""
    for name in component.type.imports(engine):
        if name.startswith(PACKAGE) and "@" in name:
            return name.rsplit("@", 1)[1]
    return None


def task_fields(component: cm.Component, engine: wasmtime.Engine) -> tuple[str, ...]:
    """The field names of the task record the component's `handle-task` takes (none without
    one)."""
    export = component.type.exports(engine).get("handle-task")
    func = getattr(export, "ty", None)
    params = getattr(func, "params", None)
    if not params:
        return ()
    record = params[0][1]
    return tuple(name for name, _ in record.fields) if isinstance(record, cm.RecordType) else ()


def task_record(task: Task, fields: tuple[str, ...]) -> Any:
    """The WIT task record with the fields `fields` names (a field the node does not know is
    left unset: the call then fails as a bad export, naming it)."""
    values = {
        "id": task.id,
        "from": task.from_,
        "input": task.input,
        "caller": task.caller,
        "from-asserted": task.from_asserted,
    }
    record: Any = cm.Record()  # its fields are plain attributes, whatever the WIT names
    for field in fields:
        if field in values:
            setattr(record, field, values[field])
    return record
