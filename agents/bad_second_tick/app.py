"""A deliberately broken release: its first tick works, every later one returns err.

A node that judged a new version by its first tick alone would call it healthy and then watch
it crash-loop (each restart's first tick works again). The rollout probation tests upgrade to
it (issue 37 item 3).
"""

import wit_world
from componentize_py_types import Err
from wit_world.imports import host, types

ticks = 0  # of this instance: a restart begins again at its good first tick


class WitWorld(wit_world.WitWorld):
    def tick(self) -> None:
        global ticks
        ticks += 1
        if ticks >= 2:
            raise Err(f"tick {ticks} of this instance: the release is broken")
        host.log("info", "first tick of this instance went well")

    def handle_task(self, task: types.Task) -> str:
        raise Err("bad_second_tick does not take tasks")

    def list_tools(self) -> list[types.Tool]:
        return []

    def call_tool(self, name: str, arguments: str) -> str:
        raise Err(f"unknown tool {name}")
