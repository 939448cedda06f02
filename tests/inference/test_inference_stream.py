"""Streamed answers through a real node, read on its real SSE streams: the pieces a provider
sends within `[inference] stream_window_ms` of the last event go out as one event (one `token`
and one TEXT_MESSAGE_CONTENT, one TOOL_CALL_ARGS), the first at once; every piece's text still
arrives, in order, and tool calls stay AG-UI tool-call events in the provider's order."""

from __future__ import annotations

from typing import Any

from tests.llm_support import Reply
from tests.polling import until
from tests.runtime.test_lifecycle import create_task
from tests.runtime.test_runtime_node import agent_toml, journal, start_node
from tests.support import READ_TOKEN, SseStream

TOKENS = [f"t{i} " for i in range(40)]
LOOKUP = ['{"n', 'umber"', ": ", '"INV', "-2", '"}']
ADD = ["[1", ", ", "2", "]"]


def node_toml(llm, built_agents, window_ms: int) -> str:
    return f"""
[inference]
local_url = "http://127.0.0.1:{llm.port}/v1"
stream_window_ms = {window_ms}
""" + agent_toml(
        "once",
        built_agents["once"],
        "tick_interval_ms = 60000\n[agents.capabilities]\ninference = true\n",
    )


async def streamed(client, reply: Reply, llm) -> tuple[list[Any], list[dict[str, Any]]]:
    """One task of `once` whose run infers once: the agent's SSE events up to the task's end,
    and its AG-UI events up to the task run's end (with its message's and tool calls' ends)."""
    llm.default = reply
    base = str(client.make_url("/"))
    async with (
        SseStream(base, "/api/v1/agents/stream?agent=once", READ_TOKEN) as events,
        SseStream(base, "/api/v1/agui/events?agent=once", READ_TOKEN) as agui,
    ):
        await create_task(client, {"steps": [{"infer": "hi"}]}, to="once")
        seen = [await events.next(15)]
        while seen[-1].event != "task_completed":
            seen.append(await events.next(15))
        frames = [(await agui.next(15)).json()]
        while not (
            frames[-1]["type"] == "RUN_FINISHED" and frames[-1]["runId"] in task_runs(frames)
        ):
            frames.append((await agui.next(15)).json())
    return seen, frames


def task_runs(frames: list[dict[str, Any]]) -> set[str]:
    """The agent's first tick may start and finish its own run while the stream opens."""
    return {f["runId"] for f in frames if f["type"] == "RUN_STARTED" and f.get("kind") == "task"}


def texts(frames: list[dict[str, Any]]) -> list[str]:
    return [f["delta"] for f in frames if f["type"] == "TEXT_MESSAGE_CONTENT"]


async def test_pieces_within_the_window_are_one_event_and_the_first_goes_at_once(
    aiohttp_client, tmp_path, built_agents, llm
):
    _, client, _ = await start_node(aiohttp_client, tmp_path, node_toml(llm, built_agents, 50))
    reply = Reply(text=TOKENS, tool_calls=[("call_a", "lookup", LOOKUP), ("call_b", "add", ADD)])
    reply.gap = 0.002  # a model's pace: 60 pieces over at least 120 ms
    events, frames = await streamed(client, reply, llm)
    tokens = [e.json()["text"] for e in events if e.event == "token"]
    assert "".join(tokens) == "".join(TOKENS) and tokens[0] == "t0 "  # every piece, in order
    assert len(tokens) < len(TOKENS)  # joined: the window is 25 pieces long
    assert texts(frames) == tokens  # AG-UI's content: the same events
    # the tool calls in the provider's order: each call's arguments after its start, before the
    # next call's (none held past it), all of them; the message's end after the last
    tools = [f for f in frames if f["type"].startswith("TOOL_CALL_")]
    runs: list[tuple[str, str]] = []
    for f in tools:
        if not runs or runs[-1] != (f["type"], f["toolCallId"]) or f["type"] != "TOOL_CALL_ARGS":
            runs.append((f["type"], f["toolCallId"]))
    assert runs == [
        ("TOOL_CALL_START", "call_a"),
        ("TOOL_CALL_ARGS", "call_a"),
        ("TOOL_CALL_START", "call_b"),
        ("TOOL_CALL_ARGS", "call_b"),
        ("TOOL_CALL_END", "call_a"),
        ("TOOL_CALL_END", "call_b"),
    ]
    for call, pieces in (("call_a", LOOKUP), ("call_b", ADD)):
        mine = [
            f["delta"] for f in tools if f["type"] == "TOOL_CALL_ARGS" and f["toolCallId"] == call
        ]
        assert "".join(mine) == "".join(pieces)
    order = [f["type"] for f in frames]
    assert order.index("TEXT_MESSAGE_START") < order.index("TEXT_MESSAGE_CONTENT")
    assert order.index("TEXT_MESSAGE_END") < order.index("TOOL_CALL_END")


async def test_a_window_of_zero_sends_each_piece_as_it_came(
    aiohttp_client, tmp_path, built_agents, llm
):
    _, client, _ = await start_node(aiohttp_client, tmp_path, node_toml(llm, built_agents, 0))
    events, frames = await streamed(client, Reply(text=TOKENS[:10]), llm)
    assert [e.json()["text"] for e in events if e.event == "token"] == TOKENS[:10]
    assert texts(frames) == TOKENS[:10]


SECRET = "sk-live-abcdef0123456789"


async def test_a_secret_split_across_the_pieces_of_one_window_is_redacted(
    aiohttp_client, tmp_path, built_agents, llm
):
    """`reader` learned a secret (its first tick reads it); a model then streams it in two
    pieces right behind the first: held in one window, they go out joined, and the joined
    text is redacted (per piece, neither half is the value)."""
    reader = agent_toml(
        "reader",
        built_agents["secrets_reader"],
        'tick_interval_ms = 60000\n[agents.grants]\ndomains = ["payments"]\n',
    )
    secrets = f'\n[secrets.payments]\napi_key = "{SECRET}"\n'
    toml = node_toml(llm, built_agents, 1000) + reader + secrets
    app, client, _ = await start_node(aiohttp_client, tmp_path, toml)
    await until(lambda: journal(app, "reader", "secret.accessed"), 15, "the secret read")
    pieces = ["The key is ", SECRET[:10], SECRET[10:], "."]
    events, frames = await streamed(client, Reply(text=pieces), llm)
    tokens = [e.json()["text"] for e in events if e.event == "token"]
    assert tokens == ["The key is ", "[secret:payments/api_key]."]
    assert texts(frames) == tokens
    assert not [e for e in events if SECRET[:10] in e.data or SECRET[10:] in e.data]
