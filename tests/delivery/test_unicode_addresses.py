"""The delivery-time guard checks the host the client connects to (node/delivery/addresses.py):
Unicode spellings of an IP literal (full-width and circled digits, ideographic full stops),
which yarl folds into 127.0.0.1 and aiohttp then connects to without asking the resolver, are
refused at delivery, also for a push config that never went through the set-time check (one a
peer replicated); a property over spellings of loopback: none reaches the receiver."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.delivery.addresses import AddressPolicy, DestinationRefused, check_url
from node.delivery.sealing import Destination
from node.delivery.service import OUTBOX
from node.delivery.webhooks import Poster
from tests.delivery.support import start_receiver
from tests.delivery.test_push import rpc
from tests.polling import until
from tests.protocol_support import cashier_toml, start_node, started
from tests.support import OPERATE_TOKEN, auth

FULL_WIDTH = "\uff11\uff12\uff17.\uff10.\uff10.\uff11"  # full-width digits
IDEOGRAPHIC = "127\u30020\u30020\u30021"  # ideographic full stops
CIRCLED = "\u2460\u2461\u2466.0.0.1"  # circled digits
FORMS = (FULL_WIDTH, IDEOGRAPHIC, CIRCLED)


def test_unicode_forms_of_a_literal_are_the_literal_they_connect_to():
    for form in FORMS:
        with pytest.raises(DestinationRefused, match=r"127\.0\.0\.1 is a loopback address"):
            check_url(f"http://{form}:8080/hook", AddressPolicy())
        assert check_url(f"http://{form}/x", AddressPolicy(["127.0.0.0/8"])).host == "127.0.0.1"
    with pytest.raises(DestinationRefused, match=r"169\.254\.169\.254 is a link-local"):
        check_url("http://\uff11\uff16\uff19.254.169.254/latest/meta-data", AddressPolicy())


# ---- a config that skipped the set-time check, on a real node -----------------------------------

NO_LOOPBACK = """
[delivery]
backoff_initial_secs = 0.05
backoff_max_secs = 0.2
attempt_timeout_secs = 5
"""


@pytest.fixture
async def node(aiohttp_server, tmp_path, built_agents):
    node = await start_node(
        aiohttp_server, tmp_path, cashier_toml("cashier", built_agents["cashier"]) + NO_LOOPBACK
    )
    await started(node, "cashier")
    return node


async def test_a_replicated_config_to_a_unicode_loopback_is_refused_at_delivery(
    node, aiohttp_server
):
    receiver = await start_receiver(aiohttp_server)
    port = receiver.url.rsplit(":", 1)[1]
    async with httpx.AsyncClient(headers=auth(OPERATE_TOKEN), timeout=30) as http:
        sent = await rpc(
            http,
            node,
            "cashier",
            "SendMessage",
            {
                "message": {
                    "messageId": "m1",
                    "role": "ROLE_USER",
                    "parts": [{"data": {"pay": {"invoice": "INV-9"}}}],
                },
                "configuration": {"returnImmediately": False},
            },
        )
        task_id = sent["result"]["task"]["id"]
        outbox = node.app[OUTBOX]
        # journaled as a peer's replicated push.configured arrives: no set-time check ran
        for index, form in enumerate(FORMS):
            destination = Destination(url=f"http://{form}:{port}/hook-{index}")
            await outbox.configure("cashier", task_id, f"peer-{index}", "peer", destination)
        await rpc(
            http,
            node,
            "cashier",
            "SendMessage",
            {
                "message": {
                    "messageId": "m2",
                    "role": "ROLE_USER",
                    "taskId": task_id,
                    "parts": [{"text": "approve"}],
                }
            },
        )

    def refused() -> list[str] | None:
        lanes = [outbox.push_lane(task_id, f"peer-{i}") for i in range(len(FORMS))]
        errors = [lane.last_error for lane in lanes if lane is not None and lane.last_error]
        return errors if len(errors) == len(FORMS) else None

    errors = await until(refused, 15, "every delivery attempted")
    assert all("127.0.0.1 is a loopback address" in error for error in errors), errors
    assert receiver.received == [] and receiver.refused == 0


# ---- the property: no spelling of loopback reaches it -------------------------------------------

DIGITS = {
    "0": ["0", "\uff10", "\u24ea", "\U0001d7ce"],  # ASCII, full-width, circled, bold
    "1": ["1", "\uff11", "\u2460", "\U0001d7cf"],
    "2": ["2", "\uff12", "\u2461", "\U0001d7d0"],
    "7": ["7", "\uff17", "\u2466", "\U0001d7d5"],
}
DOTS = [".", "\u3002", "\uff0e", "\uff61"]


@st.composite
def loopback_hosts(draw: st.DrawFn) -> str:
    literal = draw(st.sampled_from(["127.0.0.1", "127.0.0.2", "127.1.2.3"]))
    spelled = "".join(
        draw(st.sampled_from(DOTS)) if ch == "." else draw(st.sampled_from(DIGITS.get(ch, [ch])))
        for ch in literal
    )
    return spelled + draw(st.sampled_from(["", "."]))


class Loop:
    """An event loop on a thread of its own: Hypothesis drives the property synchronously."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[Loop, Poster, list[str], int]]:
    loop = Loop()
    seen: list[str] = []

    async def start() -> tuple[web.AppRunner, Poster, int]:
        async def record(request: web.Request) -> web.Response:
            seen.append(request.path_qs)
            return web.Response()

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", record)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return runner, Poster(AddressPolicy(), 2, 4, 2), port

    runner, poster, port = loop.run(start())
    yield loop, poster, seen, port
    loop.run(poster.close())
    loop.run(runner.cleanup())
    loop.close()


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(host=loopback_hosts(), scheme=st.sampled_from(["http", "HTTP"]))
def test_no_spelling_of_loopback_reaches_it(served, host, scheme):
    loop, poster, seen, port = served
    outcome = loop.run(poster.post(f"{scheme}://{host}:{port}/hook", b"{}", {}))
    assert not outcome.ok and outcome.refused, (host, outcome)
    assert seen == []
