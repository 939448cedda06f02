"""A lean pull of a durable JetStream consumer: the messages' bytes, without nats-py's Msg.

nats-py builds for every delivered message a `Msg`, parses its headers (the `Nats-Msg-Id` each
envelope carries) with the email parser, and its `fetch` waits for each message with a timeout
task of its own: measured on a ten-node mesh, about half the event loop's time went there
(bench/RESULTS.md, "Mesh over NATS JetStream"). The consumer needs only each message's subject
(its publisher), its bytes and its reply subject (the acknowledgement, and how often it was
delivered). So `RawClient` hands the messages of chosen subscriptions over as they are parsed,
and `RawPull` asks for them with JetStream's own pull requests
(`$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>`, `batch` and `expires`) on a private inbox,
keeping about two batches requested or waiting, so that the server sends the next batch while
this one is verified and committed.

A request also bounds the bytes it delivers (`max_bytes`): a message carries a run of envelopes
(nats/publisher.py), so a count alone would not bound what is in hand.

Credit: each request asks for `batch` messages; each message delivered takes one, and a request
that ends early (it expired: status 408, or the server gave up on it: 409) returns what it did
not deliver (its `Nats-Pending-Messages` header). A request lost with its server (a reconnect)
says nothing: the credit is forgotten on reconnect and when nothing at all was heard for longer
than a request lives.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable

from nats import errors
from nats.aio.client import Client

# subject, reply, payload, headers: as the protocol parser hands them over
RawSink = Callable[[bytes, bytes, bytes, bytes], None]
JS_API = "$JS.API"
STATUS_PREFIX = b"NATS/1.0 "
PENDING_HEADER = b"Nats-Pending-Messages:"
# a count the server sends has at most this many digits (int() of over 4,300 raises)
MAX_COUNT_DIGITS = 18
# a pull request lives this long; the server answers 408 when it expires unfilled
REQUEST_EXPIRES_SECS = 5.0


class RawClient(Client):
    """nats-py's client; the messages of subscriptions made with `raw_subscribe` go straight to
    their sink (no Msg, no header parsing), every other subscription works as usual."""

    def __init__(self) -> None:
        super().__init__()
        self._raw_sinks: dict[int, RawSink] = {}

    async def raw_subscribe(self, subject: str, sink: RawSink) -> int:
        """Subscribe `sink` to `subject`; the subscription's id (for `raw_unsubscribe`)."""
        subscription = await self.subscribe(subject)
        sid: int = subscription._id  # nats-py routes each message by this id
        self._raw_sinks[sid] = sink
        return sid

    async def raw_unsubscribe(self, sid: int) -> None:
        self._raw_sinks.pop(sid, None)
        subscription = self._subs.get(sid)
        if subscription is not None and not self.is_closed:
            await subscription.unsubscribe()

    async def publish_frames(self, frames: list[bytes], payload_bytes: int) -> None:
        """Send `frames` (whole PUB/HPUB commands, see `hpub_frame`) in one write: nats-py's
        `publish` builds, validates and queues each message on its own (about a third of a
        publishing node's event loop, bench/RESULTS.md "Third pass")."""
        if self.is_closed:
            raise errors.ConnectionClosedError
        if self.is_draining_pubs:
            raise errors.ConnectionDrainingError
        data = b"".join(frames)
        if not self.is_connected and (  # buffered until the reconnect, as `publish` does
            self._max_pending_size <= 0
            or len(data) + self._pending_data_size > self._max_pending_size
        ):
            raise errors.OutboundBufferLimitError
        self.stats["out_msgs"] += len(frames)
        self.stats["out_bytes"] += payload_bytes
        await self._send_command(data)
        if self._flush_queue is not None and self._flush_queue.empty():
            await self._flush_pending()

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes
    ) -> None:  # (the protocol parser passes None for headers when a message has none)
        sink = self._raw_sinks.get(sid)
        if sink is None:
            await super()._process_msg(sid, subject, reply, data, headers)
            return
        self.stats["in_msgs"] += 1
        self.stats["in_bytes"] += len(data)
        sink(subject, reply, data, headers or b"")


def hpub_frame(subject: bytes, reply: bytes, header: bytes, payload: bytes) -> bytes:
    """One HPUB command carrying a single header `header` (`Name: value`, no CR or LF)."""
    block = b"NATS/1.0\r\n" + header + b"\r\n\r\n"
    size = len(block)
    return b"HPUB %s %s %d %d\r\n%s%s\r\n" % (
        subject,
        reply,
        size,
        size + len(payload),
        block,
        payload,
    )


class Delivered:
    """A stream message as delivered: its subject, its bytes, its acknowledgement subject."""

    __slots__ = ("data", "reply", "subject")

    def __init__(self, subject: bytes, reply: bytes, data: bytes) -> None:
        self.subject = subject
        self.reply = reply
        self.data = data

    @property
    def deliveries(self) -> int:
        """How often the server delivered it (the reply subject says: `$JS.ACK.<stream>.
        <consumer>.<delivered>...`, with a domain and an account hash before the stream in
        the newer 12-token form)."""
        tokens = self.reply.split(b".")
        token = tokens[4] if len(tokens) == 9 else tokens[6] if len(tokens) >= 11 else b"1"
        return int(token) if token.isdigit() and len(token) <= MAX_COUNT_DIGITS else 1

    @property
    def consumer_seq(self) -> int:
        """Its sequence among the consumer's deliveries (the token after the stream's), 0 if
        unreadable: a follower without acknowledgements sees a lost delivery as a jump."""
        tokens = self.reply.split(b".")
        token = tokens[6] if len(tokens) == 9 else tokens[8] if len(tokens) >= 11 else b""
        return int(token) if token.isdigit() and len(token) <= MAX_COUNT_DIGITS else 0

    @property
    def stream_seq(self) -> int:
        """Its sequence in the stream (the token after the delivery count), 0 if unreadable."""
        tokens = self.reply.split(b".")
        token = tokens[5] if len(tokens) == 9 else tokens[7] if len(tokens) >= 11 else b""
        return int(token) if token.isdigit() and len(token) <= MAX_COUNT_DIGITS else 0


class ConsumerGone(ConnectionError):
    """The server says the consumer was deleted: it must be created again."""


class RawPull:
    """The messages of one durable pull consumer, a batch at a time, in delivery order."""

    def __init__(
        self,
        nc: RawClient,
        stream: str,
        consumer: str,
        batch: int,
        expires: float = REQUEST_EXPIRES_SECS,
        max_bytes: int = 0,
        gone_when_unanswered: bool = False,
    ) -> None:
        self._nc = nc
        # a request nobody answers (503: no consumer of that name on any server) ends the pull
        # (ConsumerGone) rather than being asked again at once
        self._gone_when_unanswered = gone_when_unanswered
        self._next_subject = f"{JS_API}.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self._batch = batch
        self._expires = expires
        request: dict[str, int] = {"batch": batch, "expires": int(expires * 1e9)}
        if max_bytes > 0:  # a request ends early once this many bytes are delivered (409)
            request["max_bytes"] = max_bytes
        self._request = json.dumps(request).encode()
        self._inbox = ""
        self._sid: int | None = None
        self._buffer: list[Delivered] = []
        self._arrived = asyncio.Event()
        self._requested = 0  # messages asked for and neither delivered nor given up
        self._heard = time.monotonic()
        self._error: BaseException | None = None

    async def start(self) -> None:
        self._inbox = self._nc.new_inbox()
        self._sid = await self._nc.raw_subscribe(self._inbox, self._on_message)

    async def stop(self) -> None:
        if self._sid is not None:
            await self._nc.raw_unsubscribe(self._sid)
            self._sid = None

    @property
    def heard(self) -> float:
        """When the server last sent anything for this pull (a message or a status)."""
        return self._heard

    def forget_requests(self) -> None:
        """The requests may be gone with their server (a reconnect): ask again."""
        self._requested = 0

    async def top_up(self) -> None:
        """Ask for another batch while less than one is requested or waiting here."""
        if time.monotonic() - self._heard > self._expires + 2:
            self._requested = 0  # nothing, not even an expiry, came back: the requests are lost
        if self._requested + len(self._buffer) < self._batch:
            self._requested += self._batch
            await self._nc.publish(self._next_subject, self._request, reply=self._inbox)

    async def take(self, timeout: float) -> list[Delivered]:
        """Everything delivered so far (at most two batches), waiting up to `timeout` for the
        first message; [] when none came."""
        if not self._buffer and self._error is None:
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), timeout)
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        taken, self._buffer = self._buffer[: 2 * self._batch], self._buffer[2 * self._batch :]
        return taken

    async def ack_through(self, message: Delivered) -> None:
        """Acknowledge `message` and, the consumer's ack policy being `all`, every one before."""
        await self._nc.publish(message.reply.decode(), b"")

    def _on_message(self, subject: bytes, reply: bytes, data: bytes, headers: bytes) -> None:
        self._heard = time.monotonic()
        if reply:
            self._buffer.append(Delivered(subject, reply, data))
            self._requested = max(0, self._requested - 1)
        elif headers.startswith(STATUS_PREFIX):
            self._on_status(headers)
        self._arrived.set()

    def _on_status(self, headers: bytes) -> None:
        """404/408: a request ended with no (more) messages; 409: the server dropped a request
        (too many waiting, leadership moved) or the consumer is gone; 503: no server serves the
        consumer (gone with its server, or not elected yet); 100: a heartbeat."""
        code = headers[len(STATUS_PREFIX) : len(STATUS_PREFIX) + 3]
        if code == b"100":
            return
        if code == b"409" and b"Consumer Deleted" in headers:
            self._error = ConsumerGone("the stream's consumer was deleted")
        elif code == b"503" and self._gone_when_unanswered:
            self._error = ConsumerGone("no server answers for the stream's consumer")
        at = headers.find(PENDING_HEADER)
        if at < 0:  # how much that request left undelivered is not said: ask again
            self._requested = 0
            return
        end = headers.find(b"\r\n", at)
        text = headers[at + len(PENDING_HEADER) : end if end >= 0 else None].strip()
        left = int(text) if text.isdigit() and len(text) <= MAX_COUNT_DIGITS else self._requested
        self._requested = max(0, self._requested - left)
