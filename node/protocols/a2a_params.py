"""The params of the A2A 1.0 JSON-RPC methods (ProtoJSON: camelCase, enums by name).

Decoded with msgspec in one pass; unknown fields are ignored (newer clients may send more),
a wrong type or a missing required field is -32602 naming the field.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from node.web.jsonrpc import INVALID_PARAMS, RpcError

T = TypeVar("T")


class _Params(msgspec.Struct, kw_only=True, rename="camel"):
    pass


class Part(_Params, kw_only=True, omit_defaults=True):
    text: str | None = None
    data: Any = msgspec.UNSET
    url: str | None = None
    raw: str | None = None
    media_type: str = ""
    filename: str = ""
    metadata: dict[str, Any] | None = None


USER_ROLE = "ROLE_USER"


class Message(_Params, kw_only=True, omit_defaults=True):
    """A client's message: `role` is required (A2A 1.0 marks it REQUIRED) and must be
    ROLE_USER; a client speaking as the agent, or an unknown role, is refused before anything
    is stored (a stored "BOGUS" broke strict protobuf parsing of the task for every client)."""

    message_id: str
    role: str
    parts: list[Part]
    context_id: str = ""
    task_id: str = ""
    metadata: dict[str, Any] | None = None
    extensions: list[str] = []
    reference_task_ids: list[str] = []

    def __post_init__(self) -> None:
        if self.role == "ROLE_AGENT":
            raise ValueError(f"a client's message has role {USER_ROLE}; ROLE_AGENT is the agent's")
        if self.role != USER_ROLE:
            raise ValueError(f"role must be {USER_ROLE}, not {self.role[:40]!r}")


class SendConfiguration(_Params, kw_only=True):
    accepted_output_modes: list[str] = []
    history_length: int | None = None
    return_immediately: bool = False
    task_push_notification_config: dict[str, Any] | None = None


class SendParams(_Params, kw_only=True):
    message: Message
    configuration: SendConfiguration = msgspec.field(default_factory=SendConfiguration)
    metadata: dict[str, Any] | None = None
    tenant: str = ""


class GetTaskParams(_Params, kw_only=True):
    id: str
    history_length: int | None = None
    tenant: str = ""


class ListTasksParams(_Params, kw_only=True):
    context_id: str = ""
    status: str = ""
    page_size: int | None = None
    page_token: str = ""
    history_length: int | None = None
    status_timestamp_after: str = ""
    include_artifacts: bool = False
    tenant: str = ""


class TaskIdParams(_Params, kw_only=True):
    """CancelTask and SubscribeToTask."""

    id: str
    metadata: dict[str, Any] | None = None
    tenant: str = ""


def decode(params: dict[str, Any], kind: type[T]) -> T:
    try:
        return msgspec.convert(params, kind)
    except msgspec.ValidationError as exc:
        raise RpcError(INVALID_PARAMS, f"invalid params: {exc}") from None
