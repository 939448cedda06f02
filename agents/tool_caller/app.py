"""A tool-calling agent: a task `{"question": "..."}` is answered by a model that may call the
agent's own tools (`invoice_total`, `add`) as many rounds as it needs (at most MAX_ROUNDS).

Each round is one `infer` with the whole conversation and the tools; a tool call the model
makes is run here and its result sent back as a `tool` message. The answer is
`{"answer", "rounds", "input_tokens", "output_tokens", "tool_calls"}`. A tick does nothing.
"""

import json

import wit_world
from componentize_py_types import Err
from wit_world.imports import host, types

MAX_ROUNDS = 5
INVOICES = {"INV-1": 120.5, "INV-2": 80.0, "INV-3": 42.25}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "invoice_total",
            "description": "The total of one invoice, by its number",
            "parameters": {
                "type": "object",
                "properties": {"number": {"type": "string"}},
                "required": ["number"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "The sum of two numbers",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"],
            },
        },
    },
]


def run_tool(name: str, arguments: str) -> str:
    try:
        args = json.loads(arguments or "{}")
    except ValueError:
        return json.dumps({"error": "arguments are not JSON"})
    if name == "invoice_total":
        total = INVOICES.get(str(args.get("number")))
        return json.dumps({"total": total} if total is not None else {"error": "no such invoice"})
    if name == "add":
        return json.dumps({"sum": float(args.get("a", 0)) + float(args.get("b", 0))})
    return json.dumps({"error": f"unknown tool {name}"})


def converse(question: str, model: str) -> dict:
    messages = [
        {"role": "system", "content": "You answer questions about invoices with the tools."},
        {"role": "user", "content": question},
    ]
    used = {"input_tokens": 0, "output_tokens": 0, "tool_calls": 0}
    for rounds in range(1, MAX_ROUNDS + 1):
        request = {"messages": messages, "tools": TOOLS, "max_tokens": 256}
        if model:
            request["model"] = model
        answer = json.loads(host.infer(json.dumps(request)))
        used["input_tokens"] += answer["usage"]["input_tokens"]
        used["output_tokens"] += answer["usage"]["output_tokens"]
        message = answer["message"]
        messages.append(message)
        calls = message.get("tool_calls") or []
        if not calls:
            return {"answer": message.get("content"), "rounds": rounds, **used}
        for call in calls:
            used["tool_calls"] += 1
            result = run_tool(call["function"]["name"], call["function"]["arguments"])
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    return {"answer": None, "rounds": MAX_ROUNDS, "error": "no answer in time", **used}


class WitWorld(wit_world.WitWorld):
    def tick(self) -> None:
        pass

    def handle_task(self, task: types.Task) -> str:
        data = json.loads(task.input or "{}")
        try:
            result = converse(str(data.get("question", "")), str(data.get("model", "")))
        except Err as e:
            raise Err(f"inference failed ({type(e.value).__name__}): {e.value.value}") from None
        return json.dumps(result)

    def list_tools(self) -> list[types.Tool]:
        return []

    def call_tool(self, name: str, arguments: str) -> str:
        raise Err(f"unknown tool {name}")
