"""The one way a handler reads a request body: with deadlines, and a client that leaves in the
middle counted rather than logged as a failure.

A body read without a deadline lets a client hold a connection (and a handler, and what it
holds) for as long as it trickles bytes: one byte every 5 s kept A2A, MCP, uploads, PATCH and
sync pushes unanswered for minutes (issue 45). So:

- `read_body` (and `json_body`, which decodes and validates it): the whole body within
  `[node] body_timeout_secs` of the handler's start (no timer when it came with the headers:
  the usual case costs nothing); past it a 408.
- `BodyClock`: for a streamed body (a multipart upload), each step within `body_timeout_secs`
  (an idle deadline) and the whole within `[node] upload_timeout_secs`; past either a 408.
- A client that closes its connection mid-body raises `ClientLeft`, which the front door
  answers without a traceback (nobody reads the answer); both cases are counted in
  `svc_http_bodies_cut_total{reason="timeout"|"disconnect"}`.

`tests/node/test_body_reads.py` fails when a handler under node/ reads a body another way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

import msgspec
from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from node.context import CONTEXT
from node.web.boundedjson import JsonBoundsError, loads_as
from node.web.http import Problem

T = TypeVar("T")


class ClientLeft(Exception):
    """The client closed its connection before its body arrived: nobody to answer."""


async def json_body(request: web.Request, kind: type[T]) -> T:
    """Decode (bounded: web/boundedjson.py) and validate; msgspec's message names the bad field."""
    body = await read_body(request)
    if not body:
        raise Problem(400, "the request needs a JSON body")
    try:
        return loads_as(body, kind)
    except msgspec.ValidationError as exc:
        raise Problem(400, f"invalid body: {str(exc).replace('`$.', '`')}") from None
    except JsonBoundsError as exc:
        raise Problem(400, f"JSON body refused: {exc}") from None
    except ValueError as exc:
        raise Problem(400, str(exc)) from None


async def read_body(request: web.Request) -> bytes:
    """The whole body (at most `client_max_size`: a 413 past it), within
    `node.body_timeout_secs` of the handler's start when it had not all come with the headers."""
    if request.content.is_eof():
        return await request.read()
    seconds = request.app[CONTEXT].config.node.body_timeout_secs
    return await _within(request, request.read(), seconds, f"within {seconds:g} s")


class BodyClock:
    """The deadlines of one streamed body: each step (a part's headers, a chunk) within
    `node.body_timeout_secs`, the whole within `node.upload_timeout_secs` of its start."""

    def __init__(self, request: web.Request) -> None:
        node = request.app[CONTEXT].config.node
        self.request = request
        self.idle = node.body_timeout_secs
        self.total = node.upload_timeout_secs
        self.ends = asyncio.get_running_loop().time() + self.total

    async def step(self, reading: Awaitable[T]) -> T:
        left = self.ends - asyncio.get_running_loop().time()
        if left < self.idle:
            return await _within(self.request, reading, max(left, 0.0), f"within {self.total:g} s")
        idle = f"with no {self.idle:g} s pause"
        return await _within(self.request, reading, self.idle, idle)


async def _within(request: web.Request, reading: Awaitable[T], seconds: float, how: str) -> T:
    metrics = request.app[CONTEXT].metrics
    try:
        async with asyncio.timeout(seconds):
            return await reading
    except TimeoutError:
        metrics.bodies_cut.labels(reason="timeout").inc()
        raise Problem(408, f"the request body did not arrive {how}") from None
    except ConnectionResetError:  # aiohttp's payload, when the connection is lost
        metrics.bodies_cut.labels(reason="disconnect").inc()
        raise ClientLeft from None
    except RequestPayloadError as exc:  # a broken chunked encoding, a short body
        raise Problem(400, f"the request body is malformed: {exc}") from None
