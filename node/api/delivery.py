"""Delivery state: the outbox's notifications per task push config and per approval request,
and a summary (node/delivery/, docs/notifications.md). Reads only: push configs are set over
A2A (node/protocols/a2a_push.py), approval channels in runtime.toml."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal
from urllib.parse import urlsplit

import msgspec
from aiohttp import web

from node.context import CONTEXT
from node.delivery.service import OUTBOX, Outbox, lifecycle
from node.delivery.store import Lane
from node.web.http import Problem, json_response
from node.web.routes import Doc, add_route
from projections.approvals import Approvals
from projections.tasks import Tasks


class DeliveryState(msgspec.Struct):
    """How the notifications of one destination went."""

    pending: int
    pending_bytes: int
    delivered: int
    attempts: int
    failed_attempts: int
    dropped: int
    expired: int
    last_status: int | None
    last_error: str | None
    last_attempt_at: str | None
    last_delivered_at: str | None
    next_attempt_at: str | None
    closed: str | None


class PushConfigState(msgspec.Struct):
    """One push config of a task: where it goes (scheme, host and port only: the rest of a
    URL may hold a token) and its deliveries."""

    id: str
    task_id: str
    client: str
    created_at: str
    destination: str | None
    delivery: DeliveryState


class NotificationState(msgspec.Struct):
    """One channel's notifications of an approval request."""

    channel: str
    kind: Literal["webhook", "apprise"]
    delivery: DeliveryState | None


class OutboxSummary(msgspec.Struct):
    pending_push: int
    pending_approval: int
    in_flight: int
    ingest_lag: int
    lanes: int


def _iso(epoch: float) -> str:
    return (
        datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


def state_of(outbox: Outbox, lane: Lane) -> DeliveryState:
    following = outbox.next_attempt(lane)
    return DeliveryState(
        pending=lane.pending,
        pending_bytes=lane.pending_bytes,
        delivered=lane.delivered,
        attempts=lane.attempts,
        failed_attempts=lane.failed_attempts,
        dropped=lane.dropped,
        expired=lane.expired,
        last_status=lane.last_status or None,
        last_error=lane.last_error or None,
        last_attempt_at=lane.last_attempt_at or None,
        last_delivered_at=lane.last_delivered_at or None,
        next_attempt_at=_iso(following) if following else None,
        closed=lane.closed or None,
    )


def _origin(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")


async def push_configs(request: web.Request) -> web.Response:
    task_id = request.match_info["task_id"]
    if request.app[CONTEXT].projections.get(Tasks).get(task_id) is None:
        raise Problem(404, f"no task with id {task_id!r}")
    outbox = request.app[OUTBOX]
    states = []
    for config, destination in outbox.configs(task_id):
        lane = outbox.push_lane(task_id, config.id)
        if lane is None:
            continue
        states.append(
            PushConfigState(
                id=config.id,
                task_id=task_id,
                client=config.client,
                created_at=config.created_at,
                destination=_origin(destination.url) if destination else None,
                delivery=state_of(outbox, lane),
            )
        )
    return json_response(states)


async def approval_notifications(request: web.Request) -> web.Response:
    approval_id = request.match_info["approval_id"]
    approvals = request.app[CONTEXT].projections.get(Approvals)
    if approvals.get(approval_id) is None and approvals.resolution(approval_id) is None:
        raise Problem(404, f"no approval request with id {approval_id!r}")
    outbox = request.app[OUTBOX]
    return json_response(
        [
            NotificationState(channel, kind, state_of(outbox, lane) if lane else None)  # type: ignore[arg-type]
            for channel, kind, lane in outbox.approval_lanes(approval_id)
        ]
    )


async def summary(request: web.Request) -> web.Response:
    return json_response(OutboxSummary(**request.app[OUTBOX].summary()))


def setup(app: web.Application) -> None:
    app[OUTBOX] = Outbox(app[CONTEXT])
    app.cleanup_ctx.append(lifecycle)
    add_route(
        app,
        "GET",
        "/api/v1/a2a/tasks/{task_id}/push-configs",
        push_configs,
        "read",
        Doc(
            "The A2A push notification configs of a task and how their deliveries went",
            "a2a",
            list[PushConfigState],
            errors=(404,),
            description="Set over A2A (CreateTaskPushNotificationConfig, or SendMessage's "
            "configuration); see docs/notifications.md. `destination` is the URL's scheme, "
            "host and port (null where this node cannot open it).",
        ),
    )
    add_route(
        app,
        "GET",
        "/api/v1/approvals/{approval_id}/notifications",
        approval_notifications,
        "read",
        Doc(
            "How the notifications of an approval request went, per channel",
            "approvals",
            list[NotificationState],
            errors=(404,),
            description="One entry per [[notifications.channels]] of this node; `delivery` "
            "is null for a channel the request was not sent to (a filter, or the request "
            "did not wait for people). See docs/notifications.md.",
        ),
    )
    add_route(
        app,
        "GET",
        "/api/v1/deliveries",
        summary,
        "read",
        Doc(
            "The outbox: notifications waiting and under way",
            "delivery",
            OutboxSummary,
            description="See docs/notifications.md; the metrics svc_delivery_* say more.",
        ),
    )
