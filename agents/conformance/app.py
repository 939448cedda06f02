"""The reference agent for conformance runs (docs/protocols/conformance.md).

The official suites (the A2A TCK, the MCP conformance tester) assume an agent that leaves its
tasks open and answers their fixtures; this one does, so their results are the node's protocol
handling, not an agent's shortcuts.

Tasks: every message the client sends to a task is kept (durable state `messages:<task>`, the
last MAX_KEPT of them; each one taken is logged), and the task stays open until the client says
otherwise. Each message
is one turn; what it says decides how the turn ends:
- "complete" (a text part, or a data part {"command": "complete"}): the task completes, its
  output `{"messages": [...every message kept...]}`;
- "fail": the task fails;
- "input-required": the task awaits the next message as INPUT_REQUIRED, asking for it;
- anything else: the task awaits the next message as WORKING.
Awaiting is the node's `task_await` capability (docs/agents.md, "Multi-turn tasks"), which must
be enabled for the agent.

Tools (MCP): the fixtures of the MCP conformance tester's server scenarios that an agent's
tools can serve (text results): test_simple_text, test_error_handling, test_tool_with_logging
(three log lines, which the node sends as MCP log notifications), test_tool_with_progress
(progress 0, 50, 100 of 100, reported with `task-progress("", ...)`, which the node sends as MCP
progress notifications) and json_schema_2020_12_tool (a JSON Schema 2020-12 input schema);
through the 0.3.0 world's exports (wit/0.3.0/agent.wit) its tools answer MCP content items
(test_image_content, test_audio_content, test_embedded_resource, test_multiple_content_types),
and it serves the tester's prompts (test_simple_prompt, test_prompt_with_arguments, with
completion of `arg1`, test_prompt_with_embedded_resource, test_prompt_with_image) and
resources (test://static-text, test://static-binary, the template test://template/{id}/data,
test://watched-resource).
"""

import json

import wit_world
from componentize_py_types import Err
from wit_world.imports import host, types

MAX_KEPT = 50
COMMANDS = ("complete", "fail", "input-required")
SCHEMA_2020_12 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
    "additionalProperties": False,
}
NO_ARGUMENTS = json.dumps({"type": "object", "properties": {}, "required": []})
PNG = (  # a 1x1 red pixel
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)
WAV = "UklGRiQAAABXQVZFZm10IBAAAAABAAEARKwAAIhYAQACABAAZGF0YQAAAAA="  # an empty 16-bit mono WAV
CONTENT = {
    "test_image_content": [{"type": "image", "data": PNG, "mimeType": "image/png"}],
    "test_audio_content": [{"type": "audio", "data": WAV, "mimeType": "audio/wav"}],
    "test_embedded_resource": [
        {
            "type": "resource",
            "resource": {
                "uri": "test://embedded-resource",
                "mimeType": "text/plain",
                "text": "This is an embedded resource content.",
            },
        }
    ],
    "test_multiple_content_types": [
        {"type": "text", "text": "Multiple content types test:"},
        {"type": "image", "data": PNG, "mimeType": "image/png"},
        {
            "type": "resource",
            "resource": {
                "uri": "test://mixed-content-resource",
                "mimeType": "application/json",
                "text": json.dumps({"test": "data", "value": 123}),
            },
        },
    ],
}
PROMPTS = [
    types.Prompt("test_simple_prompt", "A simple prompt without arguments", []),
    types.Prompt(
        "test_prompt_with_arguments",
        "A prompt with two required arguments",
        [
            types.PromptArgument("arg1", "First test argument", True),
            types.PromptArgument("arg2", "Second test argument", True),
        ],
    ),
    types.Prompt(
        "test_prompt_with_embedded_resource",
        "A prompt that embeds a resource",
        [types.PromptArgument("resourceUri", "URI of the resource to embed", True)],
    ),
    types.Prompt("test_prompt_with_image", "A prompt with an image", []),
]
COMPLETIONS = ["test", "testing", "tested", "other"]
RESOURCES = [
    types.ResourceInfo("test://static-text", "static-text", "A static text resource", "text/plain"),
    types.ResourceInfo(
        "test://static-binary", "static-binary", "A static binary resource", "image/png"
    ),
    types.ResourceInfo(
        "test://watched-resource", "watched-resource", "A resource to subscribe to", "text/plain"
    ),
]
TEMPLATES = [
    types.ResourceInfo(
        "test://template/{id}/data", "template-data", "Data for an id", "application/json"
    )
]
TOOLS = [
    types.Tool("test_simple_text", "Returns a simple text", NO_ARGUMENTS),
    types.Tool("test_error_handling", "Always fails", NO_ARGUMENTS),
    types.Tool("test_tool_with_logging", "Logs three lines while it runs", NO_ARGUMENTS),
    types.Tool("test_tool_with_progress", "Reports progress 0, 50, 100 of 100", NO_ARGUMENTS),
    types.Tool(
        "json_schema_2020_12_tool",
        "Tool with JSON Schema 2020-12 features",
        json.dumps(SCHEMA_2020_12),
    ),
    *(types.Tool(name, f"Returns {name[10:]}", NO_ARGUMENTS) for name in CONTENT),
]


def user(content: dict) -> dict:
    return {"role": "user", "content": content}


def text(said: str) -> dict:
    return {"type": "text", "text": said}


def command_of(message: dict) -> str:
    said = message.get("command", message.get("text", ""))
    said = said.strip().lower() if isinstance(said, str) else ""
    return said if said in COMMANDS else ""


class WitWorld(wit_world.WitWorld):
    def tick(self) -> None:
        pass

    def handle_task(self, task: types.Task) -> str:
        message = json.loads(task.input or "{}")
        key = f"messages:{task.id}"
        kept = json.loads(host.state_get(key) or "[]")
        kept = [*kept, message][-MAX_KEPT:]
        host.state_set(key, json.dumps(kept))
        host.log("debug", f"task {task.id}: took message {len(kept)}")
        command = command_of(message)
        if command == "complete":
            return json.dumps({"messages": kept})
        if command == "fail":
            raise Err("failed, as the client asked")
        asking = command == "input-required"
        text = (
            f"kept {len(kept)} message(s); send 'complete' to finish"
            if not asking
            else "waiting for your next message ('complete' finishes the task)"
        )
        request = {
            "task": task.id,
            "state": "input-required" if asking else "working",
            "message": text,
        }
        host.invoke("task_await", json.dumps(request))
        return json.dumps({"kept": len(kept)})

    def list_tools(self) -> list[types.Tool]:
        return TOOLS

    def call_tool(self, name: str, arguments: str) -> str:
        if name == "test_simple_text":
            return json.dumps("This is a simple text response for testing.")
        if name == "test_error_handling":
            raise Err("This tool intentionally returns an error for testing")
        if name == "test_tool_with_logging":
            for line in ("Tool execution started", "Tool processing data"):
                host.log("info", line)
            host.log("info", "Tool execution completed")
            return json.dumps("logged three lines")
        if name == "test_tool_with_progress":
            for done in (0, 50, 100):
                host.task_progress("", json.dumps({"progress": done, "total": 100}))
            return json.dumps("reported progress 0, 50 and 100 of 100")
        if name == "json_schema_2020_12_tool":
            return json.dumps({"received": json.loads(arguments or "{}")})
        raise Err(f"unknown tool {name}")

    # ---- the 0.3.0 world's MCP exports
    def call_tool_content(self, name: str, arguments: str) -> str:
        if name in CONTENT:
            return json.dumps(CONTENT[name])
        return json.dumps([text(self.call_tool(name, arguments))])

    def list_prompts(self) -> list[types.Prompt]:
        return PROMPTS

    def get_prompt(self, name: str, arguments: str) -> str:
        args = json.loads(arguments or "{}")
        if name == "test_simple_prompt":
            messages = [user(text("This is a simple prompt for testing."))]
        elif name == "test_prompt_with_arguments":
            said = f"Prompt with arguments: arg1='{args.get('arg1')}', arg2='{args.get('arg2')}'"
            messages = [user(text(said))]
        elif name == "test_prompt_with_embedded_resource":
            resource = {
                "uri": args.get("resourceUri") or "test://example-resource",
                "mimeType": "text/plain",
                "text": "Embedded resource content for testing.",
            }
            messages = [
                user({"type": "resource", "resource": resource}),
                user(text("Please process the embedded resource above.")),
            ]
        elif name == "test_prompt_with_image":
            messages = [
                user({"type": "image", "data": PNG, "mimeType": "image/png"}),
                user(text("Please analyze the image above.")),
            ]
        else:
            raise Err(f"unknown prompt {name}")
        return json.dumps({"messages": messages})

    def complete_argument(self, prompt: str, argument: str, value: str) -> list[str]:
        if prompt == "test_prompt_with_arguments" and argument == "arg1":
            return [c for c in COMPLETIONS if c.startswith(value)]
        return []

    def list_resources(self) -> list[types.ResourceInfo]:
        return RESOURCES

    def list_resource_templates(self) -> list[types.ResourceInfo]:
        return TEMPLATES

    def read_resource(self, uri: str) -> str:
        if uri == "test://static-text":
            content = {"text": "This is the content of the static text resource."}
            return json.dumps([{"uri": uri, "mimeType": "text/plain", **content}])
        if uri == "test://static-binary":
            return json.dumps([{"uri": uri, "mimeType": "image/png", "blob": PNG}])
        if uri == "test://watched-resource":
            return json.dumps([{"uri": uri, "mimeType": "text/plain", "text": "watched"}])
        parts = uri.split("/")
        if uri.startswith("test://template/") and len(parts) == 5 and parts[4] == "data":
            data = {"id": parts[3], "templateTest": True, "data": f"Data for ID: {parts[3]}"}
            return json.dumps(
                [{"uri": uri, "mimeType": "application/json", "text": json.dumps(data)}]
            )
        raise Err(f"no resource {uri}")
