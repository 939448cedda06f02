"""The protocol endpoints' entries in the node's OpenAPI document (node.api.openapi CATALOG).

Registered from here so the protocol code and its description stay together; the document
is built from the router on first request, after every area's setup ran.
"""

from __future__ import annotations

from node.api import openapi as o


def register() -> None:
    o.CATALOG.update(
        {
            ("POST", "/a2a/{}"): o.op(
                "A2A 1.0 JSON-RPC endpoint of an agent",
                "protocols",
                {
                    "200": {
                        "description": "A JSON-RPC response; SendStreamingMessage and "
                        "SubscribeToTask answer with an SSE stream of JSON-RPC responses",
                        "content": {
                            **o.json_content(o.ref("JsonRpcResponse")),
                            "text/event-stream": {"schema": o.S},
                        },
                    }
                },
                errors=(404,),
                body=o.json_content(o.ref("JsonRpcRequest")),
                description="Methods SendMessage, SendStreamingMessage, GetTask, ListTasks, "
                "CancelTask, SubscribeToTask. Sends and cancels need the operate scope. "
                "See docs/protocols/a2a.md.",
            ),
            ("GET", "/a2a/{}/.well-known/agent-card.json"): o.op(
                "The A2A agent card of one agent (its own JSON-RPC interface)",
                "discovery",
                o.json_content({"type": "object"}),
                errors=(404,),
            ),
            ("POST", "/agui/{}"): o.op(
                "Run an agent with AG-UI 1.0 (RunAgentInput in, AG-UI events out)",
                "protocols",
                o.sse("RUN_STARTED ... RUN_FINISHED (success, interrupt, cancelled) or RUN_ERROR"),
                errors=(400, 404),
                body=o.json_content({"type": "object", "required": ["threadId", "runId"]}),
                description="See docs/protocols/agui.md.",
            ),
        }
    )
