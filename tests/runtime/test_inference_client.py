"""The OpenAI adapter (node/inference/openai.py) against a local chat-completions server
that misbehaves."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from aiohttp import web

from node.config.model import InferenceSection
from node.inference import openai
from node.inference.models import catalogue
from node.inference.request import parse
from node.inference.stream import MAX_LINE
from node.runtime.hostapi import HostError


class Tokens(list):
    def text(self, token: str) -> None:
        self.append(token)

    def tool_call(self, call_id: str, name: str) -> None:
        raise AssertionError("no tool call expected")

    def tool_arguments(self, call_id: str, delta: str) -> None:
        raise AssertionError("no tool call expected")


def chunk(text: str) -> bytes:
    body = {"choices": [{"index": 0, "delta": {"content": text}}]}
    return f"data: {json.dumps(body)}\n\n".encode()


async def complete(aiohttp_server, frames, timeout_secs: float = 5.0) -> tuple[str, list[str]]:
    """Serve `frames` (bytes, or a float: seconds to stall) and run one completion."""

    async def completions(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for frame in frames:
            if isinstance(frame, float):
                await asyncio.sleep(frame)
            else:
                await response.write(frame)
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    server = await aiohttp_server(app)
    config = InferenceSection(
        local_url=f"http://127.0.0.1:{server.port}/v1", timeout_secs=timeout_secs
    )
    tokens = Tokens()
    model = catalogue(config)["local"]
    async with aiohttp.ClientSession() as session:
        done = await openai.complete(session, model, parse('{"prompt": "hi"}'), tokens)
    return done.text, tokens


async def test_a_complete_stream_is_the_whole_text(aiohttp_server):
    text, tokens = await complete(
        aiohttp_server, [chunk("Hello "), chunk("world"), b"data: [DONE]\n\n"]
    )
    assert text == "Hello world" and tokens == ["Hello ", "world"]


async def test_an_error_chunk_inside_the_stream_is_an_error_not_partial_text(aiohttp_server):
    error = {"error": {"message": "model overloaded", "type": "server_error"}}
    frames = [chunk("partial "), f"data: {json.dumps(error)}\n\n".encode(), b"data: [DONE]\n\n"]
    with pytest.raises(HostError) as raised:
        await complete(aiohttp_server, frames)
    assert raised.value.kind == "failed" and "model overloaded" in raised.value.message


async def test_a_stream_cut_before_it_finished_is_an_error(aiohttp_server):
    with pytest.raises(HostError) as raised:
        await complete(aiohttp_server, [chunk("half an ans")])
    assert "ended before it finished" in raised.value.message


async def test_a_long_generation_outlives_the_timeout_while_tokens_flow(aiohttp_server):
    frames = []
    for i in range(8):  # 0.8 s in all, each gap well inside the 0.4 s timeout
        frames += [0.1, chunk(f"t{i} ")]
    frames.append(b"data: [DONE]\n\n")
    text, tokens = await complete(aiohttp_server, frames, timeout_secs=0.4)
    assert len(tokens) == 8 and text.startswith("t0 t1")


async def test_a_stalled_stream_times_out_on_the_idle_timeout(aiohttp_server):
    with pytest.raises(HostError) as raised:
        await complete(aiohttp_server, [chunk("a"), 2.0, chunk("b")], timeout_secs=0.3)
    assert "no data for 0.3 s" in raised.value.message


async def test_an_over_long_line_is_a_clean_error(aiohttp_server):
    line = b"data: " + b"x" * (MAX_LINE + 10) + b"\n\n"
    with pytest.raises(HostError) as raised:
        await complete(aiohttp_server, [chunk("a"), line, b"data: [DONE]\n\n"])
    assert "over-long line" in raised.value.message or "over 1048576 bytes" in raised.value.message


async def test_the_finish_reason_ends_a_stream_without_done(aiohttp_server):
    last = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    frames = [chunk("ok"), f"data: {json.dumps(last)}\n\n".encode()]
    text, _ = await complete(aiohttp_server, frames)
    assert text == "ok"
