"""Makes effects a crash must not repeat (tests of "When a node dies mid-run", docs/agents.md).

Task input `{"steps": [...]}`: each step is a host call, made in order, and the output holds
what each returned (`{"results": [...]}`, an error as `{"error": "..."}`). A step is
`{"spend": {...}}` (invoke spend with that request), `{"fetch": url}` (an http_fetch POST to
`url`), `{"infer": prompt}` (infer on the default route), or `{"random_spend": {...}}` (a spend
whose request carries a random number drawn before the call: code that is not deterministic).
"""

import json
import random

import wit_world
from componentize_py_types import Err
from wit_world.imports import host, types


def _call(step: dict) -> object:
    if "spend" in step:
        return json.loads(host.invoke("spend", json.dumps(step["spend"])))
    if "random_spend" in step:
        request = {**step["random_spend"], "nonce": random.random()}
        return json.loads(host.invoke("spend", json.dumps(request)))
    if "fetch" in step:
        request = {"url": step["fetch"], "method": "POST", "body": "held"}
        return json.loads(host.invoke("http_fetch", json.dumps(request)))["body"]
    if "infer" in step:
        return host.infer(json.dumps({"prompt": step["infer"]}))
    raise Err(f"unknown step {sorted(step)}")


class WitWorld(wit_world.WitWorld):
    def tick(self) -> None:
        pass

    def handle_task(self, task: types.Task) -> str:
        results: list[object] = []
        for step in json.loads(task.input or "{}").get("steps", []):
            try:
                results.append(_call(step))
            except Err as e:
                results.append({"error": str(getattr(e.value, "value", e.value))})
        return json.dumps({"results": results})

    def list_tools(self) -> list[types.Tool]:
        return []

    def call_tool(self, name: str, arguments: str) -> str:
        raise Err(f"unknown tool {name}")
