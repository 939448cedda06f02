"""Counts its ticks in durable state (`count`) and logs each one as `tick N`.

The failover tests and bench (tests/failover/, bench/failover.py) use it: a count that goes
on from where it was on another node shows the state moved with the journal, and the `tick N`
log lines say which node ran which tick (each log event's origin).
"""

import wit_world
from componentize_py_types import Err
from wit_world.imports import host, types


class WitWorld(wit_world.WitWorld):
    def tick(self) -> None:
        count = int(host.state_get("count") or "0") + 1
        host.state_set("count", str(count))
        host.log("info", f"tick {count}")

    def handle_task(self, task: types.Task) -> str:
        raise Err("counter does not take tasks")

    def list_tools(self) -> list[types.Tool]:
        return []

    def call_tool(self, name: str, arguments: str) -> str:
        raise Err(f"unknown tool {name}")
