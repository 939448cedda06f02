"""The smallest useful agent: one log line per tick, a counter in durable state.

It is the template for new agents (see docs/agents.md) and the agent the tick benchmark uses.
"""

import wit_world
from componentize_py_types import Err
from wit_world.imports import host, types


class WitWorld(wit_world.WitWorld):
    def tick(self) -> None:
        host.log("info", "hello from a wasm agent")
        print("hello on stdout")  # the node turns stdout/stderr lines into log events

    def handle_task(self, task: types.Task) -> str:
        raise Err("hello does not take tasks")

    def list_tools(self) -> list[types.Tool]:
        return []

    def call_tool(self, name: str, arguments: str) -> str:
        raise Err(f"unknown tool {name}")
