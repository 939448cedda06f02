"""The reference agent for conformance runs (docs/protocols/conformance.md).

The official suites (the A2A TCK, the MCP conformance tester) assume an agent that leaves its
tasks open and answers their fixtures; this one does, so their results are the node's protocol
handling, not an agent's shortcuts.

Tasks: every message the client sends to a task is kept (durable state `messages:<task>`, the
last MAX_KEPT of them; each one taken is logged), and the task stays open until the client says
otherwise. Each message
is one turn; what it says decides how the turn ends:
- "complete" (a text part, or a data part {"command": "complete"}): the task completes, its
  output `{"messages": [...every message kept...]}`;
- "fail": the task fails;
- "input-required": the task awaits the next message as INPUT_REQUIRED, asking for it;
- anything else: the task awaits the next message as WORKING.
Awaiting is the node's `task_await` capability (docs/agents.md, "Multi-turn tasks"), which must
be enabled for the agent.

Tools (MCP): the fixtures of the MCP conformance tester's server scenarios that an agent's
tools can serve (text results): test_simple_text, test_error_handling, test_tool_with_logging
(three log lines, which the node sends as MCP log notifications), test_tool_with_progress
(progress 0, 50, 100 of 100, reported with `task-progress("", ...)`, which the node sends as MCP
progress notifications) and json_schema_2020_12_tool (a JSON Schema 2020-12 input schema).
"""

import json

import wit_world
from componentize_py_types import Err
from wit_world.imports import host, types

MAX_KEPT = 50
COMMANDS = ("complete", "fail", "input-required")
SCHEMA_2020_12 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
    "additionalProperties": False,
}
NO_ARGUMENTS = json.dumps({"type": "object", "properties": {}, "required": []})
TOOLS = [
    types.Tool("test_simple_text", "Returns a simple text", NO_ARGUMENTS),
    types.Tool("test_error_handling", "Always fails", NO_ARGUMENTS),
    types.Tool("test_tool_with_logging", "Logs three lines while it runs", NO_ARGUMENTS),
    types.Tool("test_tool_with_progress", "Reports progress 0, 50, 100 of 100", NO_ARGUMENTS),
    types.Tool(
        "json_schema_2020_12_tool",
        "Tool with JSON Schema 2020-12 features",
        json.dumps(SCHEMA_2020_12),
    ),
]


def command_of(message: dict) -> str:
    said = message.get("command", message.get("text", ""))
    said = said.strip().lower() if isinstance(said, str) else ""
    return said if said in COMMANDS else ""


class WitWorld(wit_world.WitWorld):
    def tick(self) -> None:
        pass

    def handle_task(self, task: types.Task) -> str:
        message = json.loads(task.input or "{}")
        key = f"messages:{task.id}"
        kept = json.loads(host.state_get(key) or "[]")
        kept = [*kept, message][-MAX_KEPT:]
        host.state_set(key, json.dumps(kept))
        host.log("debug", f"task {task.id}: took message {len(kept)}")
        command = command_of(message)
        if command == "complete":
            return json.dumps({"messages": kept})
        if command == "fail":
            raise Err("failed, as the client asked")
        asking = command == "input-required"
        text = (
            f"kept {len(kept)} message(s); send 'complete' to finish"
            if not asking
            else "waiting for your next message ('complete' finishes the task)"
        )
        request = {
            "task": task.id,
            "state": "input-required" if asking else "working",
            "message": text,
        }
        host.invoke("task_await", json.dumps(request))
        return json.dumps({"kept": len(kept)})

    def list_tools(self) -> list[types.Tool]:
        return TOOLS

    def call_tool(self, name: str, arguments: str) -> str:
        if name == "test_simple_text":
            return json.dumps("This is a simple text response for testing.")
        if name == "test_error_handling":
            raise Err("This tool intentionally returns an error for testing")
        if name == "test_tool_with_logging":
            for line in ("Tool execution started", "Tool processing data"):
                host.log("info", line)
            host.log("info", "Tool execution completed")
            return json.dumps("logged three lines")
        if name == "test_tool_with_progress":
            for done in (0, 50, 100):
                host.task_progress("", json.dumps({"progress": done, "total": 100}))
            return json.dumps("reported progress 0, 50 and 100 of 100")
        if name == "json_schema_2020_12_tool":
            return json.dumps({"received": json.loads(arguments or "{}")})
        raise Err(f"unknown tool {name}")
