"""A2A push notifications: what a client may configure, and what each notification carries.

A config names the client's webhook (`url`), an optional `token` (sent as
X-A2A-Notification-Token, as the a2a-sdk does) and optional `authentication` ({scheme,
credentials}: sent as `Authorization: <scheme> <credentials>`, A2A 1.0 §4.3.3). On every
state change of its task after the config was set, the node POSTs a StreamResponse holding
the task as it was at that change (`{"task": ...}`, `Content-Type: application/a2a+json`).
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from node.delivery.sealing import Destination
from node.protocols.a2a_model import TaskViews
from projections.states import TaskState
from projections.tasks import Task

MAX_ID = 128
MAX_TOKEN = 1024
MAX_CREDENTIALS = 4096
CONTENT_TYPE = "application/a2a+json"
# an HTTP authentication scheme is an RFC 9110 token
SCHEME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}$(?!\n)")
# header values: visible ASCII and spaces, never CR or LF
HEADER_VALUE = re.compile(r"^[\x20-\x7e]*$(?!\n)")


class AuthenticationInfo(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    scheme: str
    credentials: str = ""


class PushConfigParams(msgspec.Struct, rename="camel", omit_defaults=True):
    """TaskPushNotificationConfig as CreateTaskPushNotificationConfig takes it (and SendMessage's
    configuration.taskPushNotificationConfig, without taskId)."""

    url: str
    task_id: str = ""
    id: str = ""
    tenant: str = ""
    token: str = ""
    authentication: AuthenticationInfo | None = None


class ConfigRef(msgspec.Struct, rename="camel"):
    """GetTaskPushNotificationConfig and DeleteTaskPushNotificationConfig."""

    task_id: str
    id: str
    tenant: str = ""


class ListConfigsParams(msgspec.Struct, rename="camel"):
    task_id: str
    page_size: int | None = None
    page_token: str = ""
    tenant: str = ""


def problem_of(params: PushConfigParams) -> str | None:
    """What is wrong with a config's fields (never echoing a credential), or None."""
    if len(params.id) > MAX_ID:
        return f"id is longer than {MAX_ID} characters"
    if len(params.token) > MAX_TOKEN or not HEADER_VALUE.match(params.token):
        return f"token must be at most {MAX_TOKEN} visible ASCII characters"
    auth = params.authentication
    if auth is not None:
        if not SCHEME.match(auth.scheme):
            return "authentication.scheme must be an HTTP authentication scheme (e.g. Bearer)"
        if len(auth.credentials) > MAX_CREDENTIALS or not HEADER_VALUE.match(auth.credentials):
            return f"authentication.credentials must be at most {MAX_CREDENTIALS} visible ASCII"
    return None


def destination_of(params: PushConfigParams) -> Destination:
    auth = params.authentication
    return Destination(
        url=params.url,
        token=params.token,
        scheme=auth.scheme if auth else "",
        credentials=auth.credentials if auth else "",
    )


def config_json(task_id: str, config_id: str, destination: Destination | None) -> dict[str, Any]:
    """A config as Get/List/Create answer it: its URL and scheme, never its token or
    credentials (the client has them; answers are not where secrets go)."""
    out: dict[str, Any] = {"id": config_id, "taskId": task_id}
    if destination is not None:
        out["url"] = destination.url
        if destination.scheme:
            out["authentication"] = {"scheme": destination.scheme}
    return out


_json = msgspec.json.Encoder()


def body_at(
    views: TaskViews, task: Task, state: TaskState, timestamp: str, max_bytes: int
) -> bytes:
    """The StreamResponse for the task's change to `state`; over `max_bytes`, without its
    history, then without its artifacts too (metadata says so: GetTask has them)."""
    snapshot = views.as_of(task, state, timestamp)
    body = _json.encode({"task": snapshot})
    for field in ("history", "artifacts"):
        if len(body) <= max_bytes or field not in snapshot:
            continue
        del snapshot[field]
        snapshot["metadata"] = {**snapshot["metadata"], "truncated": True}
        body = _json.encode({"task": snapshot})
    return body


def headers_of(destination: Destination, idempotency_key: str) -> dict[str, str]:
    headers = {"Content-Type": CONTENT_TYPE, "Idempotency-Key": idempotency_key}
    if destination.token:
        headers["X-A2A-Notification-Token"] = destination.token
    if destination.scheme:
        credentials = f" {destination.credentials}" if destination.credentials else ""
        headers["Authorization"] = destination.scheme + credentials
    return headers
