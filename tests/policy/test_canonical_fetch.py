"""What a policy judges of an http_fetch is what the receiver gets (node/web/urls.py): dot
segments, percent-encoded dots, the case of scheme and host, default ports, trailing dots,
Unicode forms of an IP literal and userinfo, against a permit and a forbid; and, over arbitrary
URLs, the request line a real receiver sees is the URL judged, and a forbid on a host or a path
prefix is never bypassed."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from yarl import URL

from node.policy.engine import evaluate
from node.policy.policyset import load_policy_set
from node.runtime.capabilities import Capabilities, canonical_fetch
from node.runtime.hostapi import HostError
from node.web.urls import UrlRefused, canonical_url
from tests.support import make_config

AT = datetime(2026, 11, 25, 9, 0, tzinfo=UTC)
# the naive permit a person writes (a string prefix of the URL, any host) and forbids on the
# parsed fields and on the URL's text: each must hold for every spelling of what they name
POLICY = """
@id("public")
permit (principal, action == Action::"http_fetch", resource)
when { context.request.url like "*/public/*" };

@id("admin-path")
@reason("the admin API is off limits")
forbid (principal, action == Action::"http_fetch", resource)
when { context.request.path like "/admin*" };

@id("internal-host")
forbid (principal, action == Action::"http_fetch", resource)
when { context.request.host == "internal.example" };

@id("internal-url")
forbid (principal, action == Action::"http_fetch", resource)
when { context.request.url like "http://intranet.example/*" };
"""


@pytest.fixture(scope="module")
def policies(tmp_path_factory):
    directory = tmp_path_factory.mktemp("canonical")
    (directory / "p.cedar").write_text(POLICY)
    return load_policy_set(make_config(directory, '[policy]\nfiles = ["p.cedar"]\n'))


def ruling(policies, url: str) -> Any:
    """The ruling on `url` as the node asks it: the request canonicalized first (the host)."""
    request = json.dumps({"url": url})
    try:
        _, text = canonical_fetch(json.loads(request), request)
    except HostError as exc:
        return exc
    return evaluate(policies, "reader", "http_fetch", text, AT)


@pytest.mark.parametrize(
    "url",
    [
        "http://api.example/public/../admin/x",
        "http://api.example/public/%2e%2e/admin/x",
        "http://api.example/public/%2E%2E/%2E%2E/admin/x",
        "http://api.example/public/./../%61dmin/x",
        "http://internal.example/public/x",
        "HTTP://INTERNAL.EXAMPLE/public/x",
        "http://internal.example./public/x",
        "http://internal.example:80/public/x",
        "http://intranet.example:80/public/x",
        "http://INTRANET.example/public/x",
        "http://intranet.example./public/x",
        "http://intranet.example/public/x#frag",
    ],
)
def test_every_spelling_of_a_forbidden_request_is_forbidden(policies, url):
    judged = ruling(policies, url)
    assert judged.outcome == "forbid", (url, judged)


def test_the_permit_still_permits_and_userinfo_is_refused(policies):
    assert ruling(policies, "http://api.example/public/./a/../b?q=1").outcome == "permit"
    refused = ruling(policies, "http://user:pw@internal.example/public/x")
    assert isinstance(refused, HostError) and "credentials" in refused.message
    # a request journaled before canonical forms (the policy replay reads those) is judged as
    # the node would fetch it, not as its text reads: no permit for a credentialed URL either
    raw = json.dumps({"url": "http://user@api.example/public/x"})
    assert evaluate(policies, "reader", "http_fetch", raw, AT).outcome == "ask"
    dots = json.dumps({"url": "http://api.example/public/../admin/x", "host": "fake", "path": "/"})
    assert evaluate(policies, "reader", "http_fetch", dots, AT).outcome == "forbid"


def test_the_canonical_form_is_what_yarl_sends_and_is_stable():
    for text, expected in [
        ("HTTP://Api.Example:80/a/./b/../c?x=1#f", "http://api.example/a/c?x=1"),
        ("https://api.example:443", "https://api.example/"),
        ("http://\uff11\uff12\uff17.\uff10.\uff10.\uff11:8080/%7e", "http://127.0.0.1:8080/~"),
        ("http://[::1]:80/", "http://[::1]/"),
        ("http://bücher.example./", "http://xn--bcher-kva.example/"),
    ]:
        assert canonical_url(text).url == expected
        assert canonical_url(expected).url == expected
    for bad in ("ftp://h/", "http:///x", "http://u@h/", "http://h:99999/", "http://h/\r\nX: y"):
        with pytest.raises(UrlRefused):
            canonical_url(bad)


# ---- the property: what the receiver got is what was judged ----------------------------------


class Receiver:
    """A real HTTP server and the node's fetch client on a loop of their own (Hypothesis drives
    the test synchronously)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.seen: list[tuple[str, str]] = []
        self.port = self.run(self._start())

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    async def _start(self) -> int:
        async def record(request: web.Request) -> web.Response:
            self.seen.append((request.raw_path, request.headers.get("Host", "")))
            return web.Response(text="ok")

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", record)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.capabilities = Capabilities(aiohttp.ClientSession(), {})
        return site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _stop(self) -> None:
        await self.capabilities.session.close()
        await self.runner.cleanup()

    def close(self) -> None:
        self.run(self._stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    served = Receiver()
    yield served
    served.close()


HOSTS = [
    "127.0.0.1",
    "localhost",
    "LOCALHOST",
    "localhost.",
    "LocalHost.",
    "\uff11\uff12\uff17.\uff10.\uff10.\uff11",  # full-width digits
    "127\u30020\u30020\u30021",  # ideographic full stops
    "\u2460\u2461\u2466.0.0.1",  # circled digits
]
SEGMENTS = [
    "public", "admin", "Admin", "%61dmin", "..", ".", "%2e%2e", "%2E%2E", "%2e", ".%2e", "x",
    "a%20b", "~", "%7E", "é", "", ";", "a%2Fb", "%25", "%zz", "?", "#", "admin?x", "q=1&r",
]  # fmt: skip
FORBID = """
@id("all") permit (principal, action == Action::"http_fetch", resource);
@id("admin") forbid (principal, action == Action::"http_fetch", resource)
when { context.request.path like "/admin*" };
@id("localhost") forbid (principal, action == Action::"http_fetch", resource)
when { context.request.host == "localhost" && context.request.path like "/x*" };
"""


@pytest.fixture(scope="module")
def forbids(tmp_path_factory):
    directory = tmp_path_factory.mktemp("forbids")
    (directory / "p.cedar").write_text(FORBID)
    return load_policy_set(make_config(directory, '[policy]\nfiles = ["p.cedar"]\n'))


@st.composite
def urls(draw: st.DrawFn, port: int) -> str:
    scheme = draw(st.sampled_from(["http", "HTTP", "Http"]))
    host = draw(st.sampled_from(HOSTS))
    shown_port = draw(st.sampled_from([str(port), f"0{port}"]))
    path = "/".join(draw(st.lists(st.sampled_from(SEGMENTS), max_size=6)))
    return f"{scheme}://{host}:{shown_port}/{path}"


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_the_receiver_gets_what_was_judged(receiver, forbids, data):
    url = data.draw(urls(receiver.port))
    try:
        target = canonical_url(url)
    except UrlRefused:
        assume(False)
        return
    request = {"url": url}
    parsed, text = canonical_fetch(request, json.dumps(request))
    judged = evaluate(forbids, "reader", "http_fetch", text, AT)
    assert json.loads(text)["url"] == target.url == parsed["url"]
    allow = [f"127.0.0.1:{receiver.port}", f"localhost:{receiver.port}"]
    before = len(receiver.seen)
    receiver.run(receiver.capabilities.http_fetch(parsed, allow))
    (line, host_header) = receiver.seen[before]
    assert line == target.target == URL(target.url, encoded=True).raw_path_qs
    assert host_header == f"{target.host}:{target.port}"
    if line.startswith("/admin") or (
        host_header.startswith("localhost:") and line.startswith("/x")
    ):
        assert judged.outcome == "forbid", (url, line, judged)
    else:
        assert judged.outcome == "permit", (url, line, judged)
