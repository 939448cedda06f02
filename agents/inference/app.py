"""Asks the node's inference route for a short summary each tick and keeps the answer.

The route comes from state `route` (default: the node's default route).
"""

import json

import wit_world
from componentize_py_types import Err
from wit_world.imports import host, types


class WitWorld(wit_world.WitWorld):
    def tick(self) -> None:
        request = {
            "prompt": "Summarise today's pending invoices in one sentence.",
            "max_tokens": 32,
        }
        route = host.state_get("route")
        if route:
            request["route"] = route
        try:
            text = host.infer(json.dumps(request))
        except Err as e:
            host.log("warn", f"inference failed: {e.value.value}")
            return
        host.state_set("last_answer", text)
        host.log("info", f"inference answered {len(text)} chars")

    def handle_task(self, task: types.Task) -> str:
        data = json.loads(task.input or "{}")
        try:
            text = host.infer(json.dumps({"prompt": str(data.get("prompt", ""))}))
        except Err as e:
            raise Err(f"inference failed: {e.value.value}") from None
        return json.dumps({"text": text})

    def list_tools(self) -> list[types.Tool]:
        return []

    def call_tool(self, name: str, arguments: str) -> str:
        raise Err(f"unknown tool {name}")
