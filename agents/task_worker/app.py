"""Works A2A tasks: sums numbers step by step, reporting progress, or delegates.

Input `{"numbers": [..]}` -> output `{"sum": s, "count": n}` with one progress report per
number; `{"fail": "why"}` -> the task fails with that error; `{"delegate_to": agent, ...}`
-> a new task for that agent, output `{"delegated": task_id}`.
"""

import json

import wit_world
from componentize_py_types import Err
from wit_world.imports import host, types


class WitWorld(wit_world.WitWorld):
    def tick(self) -> None:
        pass

    def handle_task(self, task: types.Task) -> str:
        data = json.loads(task.input or "{}")
        if "fail" in data:
            raise Err(str(data["fail"]))
        if "delegate_to" in data:
            rest = {k: v for k, v in data.items() if k != "delegate_to"}
            try:
                new_id = host.create_task(str(data["delegate_to"]), json.dumps(rest))
            except Err as e:
                raise Err(f"delegation failed: {e.value.value}") from None
            return json.dumps({"delegated": new_id})
        numbers = data.get("numbers", [])
        total = 0
        for i, n in enumerate(numbers, start=1):
            total += n
            host.task_progress(task.id, json.dumps({"done": i, "of": len(numbers)}))
        host.log("info", f"task {task.id} from {task.from_}: sum of {len(numbers)} numbers")
        return json.dumps({"sum": total, "count": len(numbers)})

    def list_tools(self) -> list[types.Tool]:
        return []

    def call_tool(self, name: str, arguments: str) -> str:
        raise Err(f"unknown tool {name}")
