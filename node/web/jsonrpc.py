"""JSON-RPC 2.0 framing for the A2A and MCP endpoints: parse one message, build results and
errors.

Transport-free, so every fault of the envelope (-32700 unparsable, -32600 not a request) is
decided here in one place and never reaches a method.
"""

from __future__ import annotations

from typing import Any

from node.web.boundedjson import JsonBoundsError, loads

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

RequestId = str | int | None
# JSON schemas of the envelope, for the OpenAPI document of the endpoints that speak it
REQUEST_SCHEMA = {
    "type": "object",
    "properties": {
        "jsonrpc": {"type": "string", "const": "2.0"},
        "id": {"type": ["string", "integer", "null"]},
        "method": {"type": "string"},
        "params": {"type": "object"},
    },
    "required": ["jsonrpc", "method"],
}
RESPONSE_SCHEMA = {
    "type": "object",
    "properties": {
        "jsonrpc": {"type": "string", "const": "2.0"},
        "id": {"type": ["string", "integer", "null"]},
        "result": {},
        "error": {
            "type": "object",
            "properties": {"code": {"type": "integer"}, "message": {"type": "string"}, "data": {}},
            "required": ["code", "message"],
        },
    },
    "required": ["jsonrpc", "id"],
}


class RpcError(Exception):
    """A JSON-RPC error; `reason` (an A2A ErrorInfo reason) and `info` ride along in `data`."""

    def __init__(self, code: int, message: str, *, reason: str | None = None, **info: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason
        self.info = info

    def to_error(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.reason:
            error["data"] = [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": self.reason,
                    "domain": "a2a-protocol.org",
                    "metadata": {k: str(v) for k, v in self.info.items()},
                }
            ]
        return error


class Call:
    """One parsed message: its id, method and params (an object). A notification (no `id`)
    expects no answer."""

    __slots__ = ("id", "method", "notification", "params")

    def __init__(
        self, id_: RequestId, method: str, params: dict[str, Any], notification: bool = False
    ) -> None:
        self.id = id_
        self.method = method
        self.params = params
        self.notification = notification


def parse(body: bytes, *, notifications: bool = False) -> Call | dict[str, Any]:
    """The request in `body`, or the error response to send instead. Notifications are
    refused unless the protocol has them (MCP does, A2A does not)."""
    try:
        message = loads(body)
    except JsonBoundsError as exc:
        return error_response(None, RpcError(exc.rpc_code, f"request refused: {exc}"))
    except ValueError:
        return error_response(None, RpcError(PARSE_ERROR, "the body is not valid JSON"))
    if isinstance(message, list):
        return error_response(
            None, RpcError(INVALID_REQUEST, "batch requests are not supported; send one object")
        )
    if not isinstance(message, dict):
        return error_response(None, RpcError(INVALID_REQUEST, "expected a JSON-RPC 2.0 object"))
    id_ = message.get("id")
    if not _valid_id(id_):
        return error_response(
            None, RpcError(INVALID_REQUEST, "`id` must be a string or an integer")
        )
    if message.get("jsonrpc") != "2.0":
        return error_response(id_, RpcError(INVALID_REQUEST, '`jsonrpc` must be "2.0"'))
    method = message.get("method")
    if not isinstance(method, str) or not method:
        return error_response(id_, RpcError(INVALID_REQUEST, "`method` must be a string"))
    if "id" not in message and not notifications:
        return error_response(
            None, RpcError(INVALID_REQUEST, "these methods are requests: give the call an `id`")
        )
    params = message.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        return error_response(id_, RpcError(INVALID_PARAMS, "`params` must be an object"))
    return Call(id_, method, params, notification="id" not in message)


def result_response(id_: RequestId, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "result": result}


def error_response(id_: RequestId, error: RpcError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "error": error.to_error()}


def _valid_id(id_: Any) -> bool:
    if id_ is None:
        return True  # absent: reported as a missing id once the rest is known
    return isinstance(id_, str) or (isinstance(id_, int) and not isinstance(id_, bool))
