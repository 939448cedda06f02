"""Takes requests as tasks and pays through the approval-gated `spend` capability.

The protocol tests (A2A, AG-UI) use it: a task that pays waits for an operator's decision
inside `handle-task`, which is what A2A shows as input-required and AG-UI as an interrupt.

Input `{"pay": {...}}` or `{"text": "pay <invoice>"}` -> invokes `spend`; output
`{"paid": true, "result": ...}`, or `{"paid": false, "reason": ...}` when denied or timed out.
Any other `{"text": ...}` -> `{"reply": ...}`; `{"fail": why}` -> the task fails.
Progress is reported once per step. Each tick logs one line.

Tool (MCP): `pay` {any fields} -> invokes `spend` with them during the call, so an MCP call
waits on the approval gate (the MCP tests ask it as an elicitation); `{"paid": true, ...}`, or
the denial's reason as the tool's error.
"""

import json

import wit_world
from componentize_py_types import Err
from wit_world.imports import host, types


class WitWorld(wit_world.WitWorld):
    def tick(self) -> None:
        host.log("info", "cashier: nothing to pay")

    def handle_task(self, task: types.Task) -> str:
        data = json.loads(task.input or "{}")
        if "fail" in data:
            raise Err(str(data["fail"]))
        text = str(data.get("text", "")).strip()
        payment = data.get("pay")
        if payment is None and text.lower().startswith("pay "):
            payment = {"invoice": text[4:].strip()}
        if payment is None:
            host.task_progress(task.id, json.dumps({"step": "reading"}))
            return json.dumps({"reply": f"cashier heard: {text or data}"})
        host.task_progress(task.id, json.dumps({"step": "asking to pay"}))
        try:
            result = host.invoke("spend", json.dumps(payment))
        except Err as e:
            return json.dumps({"paid": False, "reason": str(e.value.value)})
        return json.dumps({"paid": True, "result": json.loads(result)})

    def list_tools(self) -> list[types.Tool]:
        schema = {"type": "object", "properties": {}, "required": []}
        return [types.Tool("pay", "Pay through the approval-gated spend", json.dumps(schema))]

    def call_tool(self, name: str, arguments: str) -> str:
        if name != "pay":
            raise Err(f"unknown tool {name}")
        try:
            result = host.invoke("spend", arguments or "{}")
        except Err as e:
            raise Err(f"not paid: {e.value.value}") from None
        return json.dumps({"paid": True, "result": json.loads(result)})
