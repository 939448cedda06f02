"""A real receiving server for notifications: an aiohttp app on a loopback port that records
every request (headers and body) and answers with the status its test chooses."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web

from tests.polling import until

DELIVERY_TOML = """
[delivery]
allow_networks = ["127.0.0.0/8"]
backoff_initial_secs = 0.05
backoff_max_secs = 0.2
attempt_timeout_secs = 5
"""


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """Records what arrives; `answer(received)` gives the status (200 by default), or the status
    and headers to answer with."""

    received: list[Received] = field(default_factory=list)
    answer: Callable[[Received], int | tuple[int, dict[str, str]]] = lambda _: 200
    url: str = ""
    refused: int = 0  # requests answered with something other than 2xx

    async def handle(self, request: web.Request) -> web.Response:
        got = Received(request.path_qs, dict(request.headers), await request.read())
        answer = self.answer(got)
        status, headers = answer if isinstance(answer, tuple) else (answer, {})
        if 200 <= status < 300:
            self.received.append(got)
        else:
            self.refused += 1
        if 300 <= status < 400:
            headers = {"Location": "http://127.0.0.1:9/elsewhere", **headers}
        return web.Response(status=status, headers=headers)

    def at(self, path: str) -> list[Received]:
        return [r for r in self.received if r.path == path]

    async def wait_for(self, count: int, path: str | None = None, timeout: float = 15) -> None:
        def enough() -> bool:
            got = self.received if path is None else self.at(path)
            return len(got) >= count

        await until(enough, timeout, f"{count} notification(s) received")


async def start_receiver(aiohttp_server) -> Receiver:
    receiver = Receiver()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", receiver.handle)
    server = await aiohttp_server(app, host="127.0.0.1")
    receiver.url = str(server.make_url("")).rstrip("/")
    return receiver


def send_params(data: dict, *, push_url: str | None = None, **configuration) -> dict:
    """SendMessage's params: a user message holding `data`, with a push config to `push_url`."""
    if push_url is not None:
        configuration["taskPushNotificationConfig"] = {"url": push_url}
    return {
        "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"data": data}]},
        "configuration": configuration,
    }


async def rpc(http, node_url: str, agent: str, method: str, params: dict, token: str) -> dict:
    """One A2A JSON-RPC call; the JSON-RPC answer (HTTP 200 asserted)."""
    answer = await http.post(
        f"{node_url}/a2a/{agent}",
        json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert answer.status_code == 200, answer.text
    return answer.json()
