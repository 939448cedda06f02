"""The protocol streams (A2A's SubscribeToTask and SendStreamingMessage, AG-UI runs) hold
stream slots like the SSE endpoints: past a token's cap a 429 before anything is done, and a
reload that revokes the token ends its open streams."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import httpx
import pytest

from node.config.reload import Reloader
from node.streams.slots import STREAM_SLOTS
from tests.polling import until
from tests.protocol_support import agent_toml, cashier_toml, start_node, started
from tests.support import OPERATE_TOKEN, auth

WATCH_TOKEN = "test-watch-token-000000002"
WATCHER = f'[[auth.tokens]]\nname = "watcher"\ntoken = "{WATCH_TOKEN}"\nscopes = ["read"]\n'


@pytest.fixture
async def node(aiohttp_server, tmp_path, built_agents):
    toml = (
        WATCHER
        + agent_toml("worker", built_agents["task_worker"])
        + cashier_toml("cashier", built_agents["cashier"])
    )
    node = await start_node(aiohttp_server, tmp_path, toml)
    node.config_path = tmp_path / "runtime.toml"
    await started(node, "worker", "cashier")
    return node


def call(method: str, params: dict[str, Any], id_: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}


class RpcStream:
    """A streaming JSON-RPC call read in the background: its frames, and whether it ended."""

    def __init__(self, http: httpx.AsyncClient, url: str, body: dict[str, Any], token: str):
        self.frames: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.status = 0
        self._opened = asyncio.Event()
        self._task = asyncio.create_task(self._read(http, url, body, token))

    async def _read(self, http, url, body, token) -> None:
        try:
            async with http.stream("POST", url, json=body, headers=auth(token)) as response:
                self.status = response.status_code
                self._opened.set()
                async for line in response.aiter_lines():
                    if line.startswith("data: "):
                        self.frames.put_nowait(json.loads(line[6:]))
        except httpx.HTTPError:
            pass
        finally:
            self._opened.set()
            self.frames.put_nowait(None)

    async def opened(self) -> int:
        await asyncio.wait_for(self._opened.wait(), 10)
        return self.status

    async def ended(self, timeout: float) -> None:
        while await asyncio.wait_for(self.frames.get(), timeout) is not None:
            pass

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


async def test_protocol_streams_are_capped_and_end_when_their_token_is_revoked(node):
    a2a = f"{node.url}/a2a/cashier"
    slots = node.app[STREAM_SLOTS]
    slots.streams_per_token = 1  # as `sse_streams_per_token = 1` in [node] would
    pay = {"parts": [{"data": {"pay": {"invoice": "INV-7", "amount_cents": 5}}}]}
    message = {"message": {"messageId": "m1", "role": "ROLE_USER", **pay}}
    async with httpx.AsyncClient(timeout=30) as http:
        # a task waiting for approval: its stream ends at input-required, the task lives on
        sending = RpcStream(http, a2a, call("SendStreamingMessage", message), OPERATE_TOKEN)
        assert await sending.opened() == 200
        task_id = (await sending.frames.get())["result"]["task"]["id"]
        await sending.ended(10)
        await until(lambda: slots.open_count == 0, 5, "the sending stream's slot freed")

        watching = RpcStream(http, a2a, call("SubscribeToTask", {"id": task_id}), WATCH_TOKEN)
        assert await watching.opened() == 200
        assert (await watching.frames.get())["result"]["task"]["id"] == task_id
        following = RpcStream(http, a2a, call("SubscribeToTask", {"id": task_id}), OPERATE_TOKEN)
        assert await following.opened() == 200
        assert (await following.frames.get())["result"]["task"]["id"] == task_id
        # each token holds its one stream: more are refused before anything is done
        again = await http.post(
            a2a, json=call("SubscribeToTask", {"id": task_id}), headers=auth(WATCH_TOKEN)
        )
        assert again.status_code == 429 and again.headers["Retry-After"]
        assert "sse_streams_per_token" in again.json()["detail"]
        before = node.journal("cashier", "task.created")
        second = message | {"message": {**message["message"], "messageId": "m2"}}
        refused = await http.post(
            a2a, json=call("SendStreamingMessage", second), headers=auth(OPERATE_TOKEN)
        )
        assert refused.status_code == 429
        run = {"threadId": "t1", "runId": "r1", "messages": [], "state": {}, "tools": []}
        run_refused = await http.post(
            f"{node.url}/agui/worker", json=run, headers=auth(OPERATE_TOKEN)
        )
        assert run_refused.status_code == 429
        assert node.journal("cashier", "task.created") == before  # the refused send did nothing

        # the watcher's token leaves the config: the reload ends its stream, not the other
        path = node.config_path
        path.write_text(path.read_text().replace(WATCHER, ""))
        assert await Reloader(node.app, path, None).reload()
        await watching.ended(5)
        assert slots.open_count == 1
        with pytest.raises(TimeoutError):  # still open: nothing comes, not its end
            await asyncio.wait_for(following.frames.get(), 0.5)
        await following.close()
        await watching.close()
