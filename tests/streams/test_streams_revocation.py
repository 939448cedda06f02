"""A reload ends the open streams of a token it removed or narrowed, within seconds; the
streams of tokens still valid go on."""

from __future__ import annotations

import asyncio
import signal
import time

import httpx

from tests.support import (
    OPERATE_TOKEN,
    READ_TOKEN,
    NodeProcess,
    SseStream,
    auth,
    logs_on_failure,
    write_config,
)

GONE_TOKEN = "test-gone-token-0000000001"
NARROW_TOKEN = "test-narrow-token-00000001"


def tokens(narrow_scopes: str, *, with_gone: bool) -> str:
    gone = f'[[auth.tokens]]\nname = "gone"\ntoken = "{GONE_TOKEN}"\nscopes = ["read"]\n'
    narrow = (
        f'[[auth.tokens]]\nname = "narrow"\ntoken = "{NARROW_TOKEN}"\nscopes = {narrow_scopes}\n'
    )
    return (gone if with_gone else "") + narrow


async def ended_within(stream: SseStream, seconds: float) -> float:
    """Seconds until the server ended the stream (keep-alives skipped)."""
    started = time.monotonic()
    while True:
        try:
            await stream.next(max(0.01, seconds - (time.monotonic() - started)))
        except EOFError:
            return time.monotonic() - started


async def revoke_while_streaming(node: NodeProcess, path) -> None:
    base = node.url
    async with (
        SseStream(base, "/api/v1/events", GONE_TOKEN) as gone,
        SseStream(base, "/api/v1/a2a/events", NARROW_TOKEN) as narrow,
        SseStream(base, "/api/v1/agui/events", GONE_TOKEN) as gone_agui,
        SseStream(base, "/api/v1/events", READ_TOKEN) as kept,
    ):
        for stream in (gone, narrow, gone_agui, kept):
            assert stream.response.status_code == 200
        assert (await gone_agui.next()).event == "STATE_SNAPSHOT"
        # the config loses `gone` and narrows `narrow` to publish; SIGHUP applies it
        path.write_text(path.read_text().replace(tokens('["read"]', with_gone=True), ""))
        path.write_text(path.read_text() + tokens('["publish"]', with_gone=False))
        node.proc.send_signal(signal.SIGHUP)
        waits = await asyncio.gather(
            ended_within(gone, 5), ended_within(narrow, 5), ended_within(gone_agui, 5)
        )
        print(f"streams ended {', '.join(f'{w:.2f}' for w in waits)} s after SIGHUP was sent")
        assert max(waits) < 5
        # the reader's stream goes on: it gets the next event
        async with httpx.AsyncClient(base_url=base, headers=auth(OPERATE_TOKEN)) as http:
            posted = await http.post(
                "/api/v1/findings", json={"agent": "node-a", "severity": "info", "title": "after"}
            )
            assert posted.status_code == 201, posted.text
            while (event := await kept.next(5)).event != "finding":
                pass
            assert '"after"' in event.data
            # and the revoked token is refused from now on
            refused = await http.get("/api/v1/events", headers=auth(GONE_TOKEN))
            assert refused.status_code == 401
            narrowed = await http.get("/api/v1/a2a/events", headers=auth(NARROW_TOKEN))
            assert narrowed.status_code == 403


def test_sighup_ends_the_streams_of_removed_and_narrowed_tokens(tmp_path):
    path = write_config(tmp_path, tokens('["read"]', with_gone=True))
    text = path.read_text().replace(
        'data_dir = "data"', 'data_dir = "data"\nsse_keepalive_secs = 1'
    )
    path.write_text(text)
    node = NodeProcess(path)
    with node, logs_on_failure(node.log_path):
        asyncio.run(revoke_while_streaming(node, path))
        log = node.log_path.read_text()
        assert "ended the open streams of revoked tokens: gone (2), narrow (1)" in log
        assert GONE_TOKEN not in log and NARROW_TOKEN not in log
        assert node.terminate() == 0
