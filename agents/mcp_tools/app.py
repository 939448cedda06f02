"""Offers MCP tools: `add` and `divide` (which fails on a zero divisor) and `remember`,
which keeps a note in durable state. The unlisted tool `crash` raises an unexpected
exception, which traps the agent (for tests of the runtime's fault handling)."""

import json

import wit_world
from componentize_py_types import Err
from wit_world.imports import host, types


def _schema(props: dict, required: list[str]) -> str:
    return json.dumps({"type": "object", "properties": props, "required": required})


NUMBERS = {"a": {"type": "number"}, "b": {"type": "number"}}

TOOLS = [
    types.Tool("add", "Add two numbers", _schema(NUMBERS, ["a", "b"])),
    types.Tool("divide", "Divide a by b; fails when b is 0", _schema(NUMBERS, ["a", "b"])),
    types.Tool(
        "remember", "Keep a note in durable state", _schema({"note": {"type": "string"}}, ["note"])
    ),
]


class WitWorld(wit_world.WitWorld):
    def tick(self) -> None:
        pass

    def handle_task(self, task: types.Task) -> str:
        raise Err("mcp_tools does not take tasks")

    def list_tools(self) -> list[types.Tool]:
        return TOOLS

    def call_tool(self, name: str, arguments: str) -> str:
        try:
            args = json.loads(arguments or "{}")
        except ValueError as e:
            raise Err(f"arguments are not JSON: {e}") from None
        if name == "add":
            return json.dumps({"result": _num(args, "a") + _num(args, "b")})
        if name == "divide":
            b = _num(args, "b")
            if b == 0:
                raise Err("division by zero")
            return json.dumps({"result": _num(args, "a") / b})
        if name == "remember":
            note = str(args.get("note", ""))
            host.state_set("note", note)
            return json.dumps({"remembered": note})
        if name == "crash":
            raise RuntimeError("crash requested")
        raise Err(f"unknown tool {name}")


def _num(args: dict, key: str) -> float:
    value = args.get(key)
    if not isinstance(value, (int, float)):
        raise Err(f"argument {key} must be a number")
    return value
