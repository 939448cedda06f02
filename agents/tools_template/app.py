"""tools_template: answers questions with a model that calls this agent's tools.

A task `{"question": "..."}` is one conversation: each round is one `host.infer` with the
messages so far and the tools (JSON Schema functions); each tool call the model makes is run
here (`TOOLS`) and its result sent back as a `tool` message, until the model answers in words
(at most MAX_ROUNDS rounds). The answer is `{"answer", "rounds", "input_tokens",
"output_tokens"}`. On a node, the agent needs the capability and the models it may use:

    [agents.capabilities]
    inference = true
    [agents.inference]
    models = ["local"]

Built with componentize-py against the world `agent` 0.3.0: `agent-node agent build`.
"""

import json

import wit_world
from componentize_py_types import Err
from wit_world.imports import host, types

MAX_ROUNDS = 5
SYSTEM = "You answer questions about the weather with the tools you have."


# ---- helpers: one chat round, and a tool-calling loop ------------------------------------------
def chat(messages: list, tools: list | None = None, **options) -> dict:
    """One inference call: the node's answer `{"message", "finish_reason", "usage", "model"}`.
    Options: model (an alias the node allows), max_tokens, temperature, tool_choice,
    response_format. Raises Err with the host-error when the node refuses or the model fails."""
    request = {"messages": messages, **options}
    if tools:
        request["tools"] = tools
    return json.loads(host.infer(json.dumps(request)))


def function(name: str, description: str, parameters: dict) -> dict:
    """A tool as the model sees it: a JSON Schema function."""
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


def run_with_tools(messages: list, tools: dict, max_rounds: int = MAX_ROUNDS, **options) -> dict:
    """Call the model until it answers in words, running the tools it asks for; `tools` maps a
    name to (its schema from `function`, a Python function of the arguments' dict)."""
    schemas = [schema for schema, _ in tools.values()]
    used = {"input_tokens": 0, "output_tokens": 0}
    for rounds in range(1, max_rounds + 1):
        answer = chat(messages, schemas, **options)
        used["input_tokens"] += answer["usage"]["input_tokens"]
        used["output_tokens"] += answer["usage"]["output_tokens"]
        message = answer["message"]
        messages.append(message)
        calls = message.get("tool_calls") or []
        if not calls:
            return {"answer": message.get("content"), "rounds": rounds, **used}
        for call in calls:
            name = call["function"]["name"]
            try:
                arguments = json.loads(call["function"]["arguments"] or "{}")
                result = tools[name][1](arguments) if name in tools else {"error": "no such tool"}
            except (ValueError, KeyError, TypeError) as e:
                result = {"error": f"{type(e).__name__}: {e}"}
            messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)}
            )
    return {"answer": None, "rounds": max_rounds, "error": "no answer in time", **used}


# ---- this agent's tools ---------------------------------------------------------------------
FORECASTS = {"paris": "sunny, 21 C", "oslo": "snow, -3 C"}


def forecast(arguments: dict) -> dict:
    city = str(arguments.get("city", "")).lower()
    return {"forecast": FORECASTS.get(city, "unknown")}


TOOLS = {
    "forecast": (
        function(
            "forecast",
            "Tomorrow's weather in a city",
            {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        ),
        forecast,
    ),
}


class WitWorld(wit_world.WitWorld):
    def tick(self) -> None:
        pass

    def handle_task(self, task: types.Task) -> str:
        data = json.loads(task.input or "{}")
        messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": str(data.get("question", ""))},
        ]
        try:
            return json.dumps(run_with_tools(messages, TOOLS, max_tokens=512))
        except Err as e:  # the node refused (not-permitted, a budget) or the model failed
            raise Err(f"inference failed: {e.value.value}") from None

    def list_tools(self) -> list[types.Tool]:
        return []

    def call_tool(self, name: str, arguments: str) -> str:
        raise Err(f"unknown tool {name}")

    # ---- MCP beyond tools (world 0.3.0): this agent offers none of them; the node adds its
    # own resources, read from the journal (agent://<name>/state, findings, logs...)
    def call_tool_content(self, name: str, arguments: str) -> str:
        """Called instead of call_tool: the result as a list of MCP content items."""
        return json.dumps([{"type": "text", "text": self.call_tool(name, arguments)}])

    def list_prompts(self) -> list[types.Prompt]:
        return []

    def get_prompt(self, name: str, arguments: str) -> str:
        raise Err(f"unknown prompt {name}")

    def complete_argument(self, prompt: str, argument: str, value: str) -> list[str]:
        return []

    def list_resources(self) -> list[types.ResourceInfo]:
        return []

    def list_resource_templates(self) -> list[types.ResourceInfo]:
        return []

    def read_resource(self, uri: str) -> str:
        raise Err(f"no resource {uri}")
