"""An agent built against the 0.2.0 world (wit/0.2.0/agent.wit): it answers each task with
what the node told it of the task's origin, and offers a catalogue of tools large enough to
need several pages of MCP's tools/list.

A task -> output `{"from": ..., "caller": ..., "from_asserted": ...}`; the tools `tool-00` ..
`tool-39` each answer their own name.
"""

import json

import wit_world
from componentize_py_types import Err
from wit_world.imports import types

SCHEMA = json.dumps({"type": "object", "properties": {"note": {"type": "string"}}})
DESCRIPTION = "describes itself at length " * 8
TOOLS = [types.Tool(f"tool-{i:02d}", f"entry {i:02d}: {DESCRIPTION}", SCHEMA) for i in range(40)]


class WitWorld(wit_world.WitWorld):
    def tick(self) -> None:
        pass

    def handle_task(self, task: types.Task) -> str:
        return json.dumps(
            {"from": task.from_, "caller": task.caller, "from_asserted": task.from_asserted}
        )

    def list_tools(self) -> list[types.Tool]:
        return TOOLS

    def call_tool(self, name: str, arguments: str) -> str:
        if not any(tool.name == name for tool in TOOLS):
            raise Err(f"unknown tool {name}")
        return json.dumps({"tool": name})
