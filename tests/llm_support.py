"""A language-model server for the tests: real HTTP (aiohttp), speaking the documented streaming
formats of OpenAI's chat completions (`POST /v1/chat/completions`: content and `tool_calls`
deltas, `finish_reason`, usage in the last chunk, `data: [DONE]`) and Anthropic's Messages API
(`POST /v1/messages`: message_start, content_block_start/delta/stop, message_delta,
message_stop). Each request takes the next scripted `Reply` (or the default one), and is
recorded with its headers."""

from __future__ import annotations

import asyncio
import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Reply:
    text: list[str] = field(default_factory=list)  # content pieces, streamed one by one
    # (id, name, argument pieces)
    tool_calls: list[tuple[str, str, list[str]]] = field(default_factory=list)
    input_tokens: int = 11
    output_tokens: int = 7
    status: int = 200  # >= 400: answered with this status and `error_body`
    retry_after: str | None = None
    error_body: str = '{"error": {"message": "rate limited"}}'
    error_after: int | None = None  # an error event after this many pieces
    cut_after: int | None = None  # the body ends after this many pieces, unfinished
    gap: float = 0.0  # seconds before each piece
    model: str = "served-model"


@dataclass
class Asked:
    path: str
    body: dict[str, Any]
    headers: dict[str, str]


class LLM:
    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.default = Reply(text=["ok"])
        self.asked: list[Asked] = []
        self.arrived = asyncio.Event()
        self.port = 0  # the test server's, once it listens

    def script(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._openai)
        app.router.add_post("/v1/messages", self._anthropic)
        return app

    async def _next(self, request: web.Request) -> tuple[Reply, web.StreamResponse | None]:
        body = await request.json()
        self.asked.append(Asked(request.path, body, dict(request.headers)))
        self.arrived.set()
        reply = self.replies.popleft() if self.replies else self.default
        if reply.status >= 400:
            headers = {"Retry-After": reply.retry_after} if reply.retry_after else {}
            return reply, web.Response(
                status=reply.status,
                text=reply.error_body,
                content_type="application/json",
                headers=headers,
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        return reply, response

    # ------------------------------------------------------------------ OpenAI
    async def _openai(self, request: web.Request) -> web.StreamResponse:
        reply, response = await self._next(request)
        if isinstance(response, web.Response):
            return response
        assert response is not None
        base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": reply.model}

        async def send(chunk: dict[str, Any]) -> None:
            await response.write(f"data: {json.dumps({**base, **chunk})}\n\n".encode())

        pieces: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        pieces += [{"content": t} for t in reply.text]
        for index, (call_id, name, args) in enumerate(reply.tool_calls):
            first = {"index": index, "id": call_id, "type": "function"}
            pieces.append({"tool_calls": [{**first, "function": {"name": name, "arguments": ""}}]})
            pieces += [
                {"tool_calls": [{"index": index, "function": {"arguments": a}}]} for a in args
            ]
        for n, delta in enumerate(pieces):
            if await self._interrupt(reply, n, response, openai=True):
                return response
            await send({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        finish = "tool_calls" if reply.tool_calls else "stop"
        await send({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        usage = {
            "prompt_tokens": reply.input_tokens,
            "completion_tokens": reply.output_tokens,
            "total_tokens": reply.input_tokens + reply.output_tokens,
        }
        await send({"choices": [], "usage": usage})
        await response.write(b"data: [DONE]\n\n")
        return response

    async def _interrupt(
        self, reply: Reply, n: int, response: web.StreamResponse, openai: bool
    ) -> bool:
        if reply.gap:
            await asyncio.sleep(reply.gap)
        if reply.cut_after is not None and n >= reply.cut_after:
            return True
        if reply.error_after is not None and n >= reply.error_after:
            error = {"message": "overloaded mid-stream", "type": "server_error"}
            if openai:
                await response.write(f"data: {json.dumps({'error': error})}\n\n".encode())
            else:
                event = {"type": "error", "error": {"type": "overloaded_error", **error}}
                await response.write(f"event: error\ndata: {json.dumps(event)}\n\n".encode())
            return True
        return False

    # ------------------------------------------------------------------ Anthropic
    async def _anthropic(self, request: web.Request) -> web.StreamResponse:
        reply, response = await self._next(request)
        if isinstance(response, web.Response):
            return response
        assert response is not None

        async def send(event: dict[str, Any]) -> None:
            await response.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())

        message: dict[str, Any] = {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": reply.model,
            "stop_reason": None,
            "usage": {"input_tokens": reply.input_tokens, "output_tokens": 1},
        }
        await send({"type": "message_start", "message": message})
        await send({"type": "ping"})
        events: list[dict[str, Any]] = []
        index = 0
        if reply.text:
            block: dict[str, Any] = {"type": "text", "text": ""}
            events.append({"type": "content_block_start", "index": index, "content_block": block})
            events += [
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "text_delta", "text": t},
                }
                for t in reply.text
            ]
            events.append({"type": "content_block_stop", "index": index})
            index += 1
        for call_id, name, args in reply.tool_calls:
            block = {"type": "tool_use", "id": call_id, "name": name}
            block["input"] = {}
            events.append({"type": "content_block_start", "index": index, "content_block": block})
            events += [
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": a},
                }
                for a in args
            ]
            events.append({"type": "content_block_stop", "index": index})
            index += 1
        for n, event in enumerate(events):
            if await self._interrupt(reply, n, response, openai=False):
                return response
            await send(event)
        stop = "tool_use" if reply.tool_calls else "end_turn"
        await send(
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": reply.output_tokens},
            }
        )
        await send({"type": "message_stop"})
        return response
