"""The home node's side: publish each own envelope once, in order, to the mesh's stream.

Each message is one envelope in exactly the bytes an HTTP push carries for it (the spec's
"as pushed" object), with `Nats-Msg-Id` = `<journal>:<seq>` so that a re-publish after a crash
is dropped by the server (inside its duplicate window). Publishes are asynchronous, up to
`publish_window` in flight; the cursor (per journal, the last seq whose publish and every
publish before it JetStream acknowledged) is written atomically to `nats-published.json` in
the data folder after every window, and publishing resumes from it.

A stream ack is not an fsync (JetStream syncs every 2 min by default), so on start and after
every reconnect the stream's last message of each own journal is compared with the cursor: a
stream that lost acknowledged envelopes gets them again. A journal the stream holds nothing of
(its messages aged out, or all were lost) resumes at the cursor; receivers repair any gap over
HTTP (nats_repair.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from pathlib import Path
from typing import Any

import msgspec
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from eventstore.envelope import Envelope
from node.context import NodeContext
from node.files import write_atomically
from node.sync.nats_metrics import NatsMetrics
from node.sync.nats_subjects import MSG_ID_HEADER, msg_id, seq_of_msg_id, stream_name, subject
from projections.journals import Journals

log = logging.getLogger("agent-node.sync")
CURSOR_FILE = "nats-published.json"
IDLE_CHECK_SECS = 5.0
ACK_TIMEOUT_SECS = 10.0
_encoder = msgspec.json.Encoder()


def encode_envelope(envelope: Envelope) -> bytes:
    """One envelope as an HTTP push carries it (wire.encode_push, one item)."""
    return _encoder.encode(envelope.as_pushed())


class Cursor:
    """journal → last seq acknowledged by JetStream, durable across kill -9."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.acked: dict[str, int] = {}
        try:
            loaded = json.loads(path.read_text())
            self.acked = {str(k): int(v) for k, v in loaded.items()}
        except FileNotFoundError:
            pass
        except (ValueError, TypeError, AttributeError):
            log.warning("nats: %s is unreadable; republishing from the stream's heads", path)

    def save(self) -> None:
        write_atomically(self.path, json.dumps(self.acked, sort_keys=True).encode())


class NatsPublisher:
    def __init__(self, ctx: NodeContext, js: JetStreamContext, metrics: NatsMetrics) -> None:
        self._ctx = ctx
        self._js = js
        self._metrics = metrics
        self._mesh = ctx.config.mesh
        self._stream = stream_name(self._mesh.name)
        self.cursor = Cursor(ctx.config.data_path / CURSOR_FILE)
        self._next: dict[str, int] = {}  # journal → last seq to publish after
        self._reconcile = asyncio.Event()
        self._reconcile.set()

    def reconnected(self) -> None:
        """The connection came back (maybe to a server that lost data): compare again."""
        self._reconcile.set()

    def own_journals(self) -> dict[str, int]:
        journals = self._ctx.projections.get(Journals)
        me = self._ctx.name
        return {
            stream: head
            for stream, head in journals.head.items()
            if not stream.startswith("$") and journals.home.get(stream) == me
        }

    async def run(self) -> None:
        store = self._ctx.store
        while True:
            if self._reconcile.is_set():
                self._reconcile.clear()
                await self._compare_with_stream()
            position = store.last_position
            work = {j: h for j, h in self.own_journals().items() if h > self._next.get(j, 0)}
            if work:
                await self._publish_window(work)
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(store.wait_beyond(position), IDLE_CHECK_SECS)

    async def _compare_with_stream(self) -> None:
        """Resume each own journal at the stream's last message of it (lower than the cursor:
        the stream lost acknowledged envelopes; republish them), else at the cursor."""
        for journal in self.own_journals():
            acked = self.cursor.acked.get(journal, 0)
            try:
                last = await self._js.get_last_msg(
                    self._stream, subject(self._mesh.name, self._ctx.name, journal)
                )
                held = seq_of_msg_id((last.headers or {}).get(MSG_ID_HEADER, "")) or acked
            except NotFoundError:
                held = acked
            if held < acked:
                log.warning(
                    "nats: the stream holds %s up to %d, this node had %d acknowledged; "
                    "republishing the rest",
                    journal,
                    held,
                    acked,
                )
            self._next[journal] = held

    async def _publish_window(self, work: dict[str, int]) -> None:
        """Up to publish_window envelopes, shared between journals, in flight at once."""
        share = max(1, self._mesh.publish_window // len(work))
        batches = await asyncio.to_thread(self._read, work, share)
        futures: list[tuple[Envelope, asyncio.Future[Any]]] = []
        for envelope in batches:
            future = await self._js.publish_async(
                subject(self._mesh.name, self._ctx.name, envelope.stream),
                encode_envelope(envelope),
                headers={MSG_ID_HEADER: msg_id(envelope.stream, envelope.seq)},
            )
            futures.append((envelope, future))
            self._metrics.pending_publishes.set(self._js.publish_async_pending())
        if futures:
            await asyncio.wait([f for _, f in futures], timeout=ACK_TIMEOUT_SECS)
        self._metrics.pending_publishes.set(self._js.publish_async_pending())
        failed: set[str] = set()
        acked = 0
        for envelope, future in futures:
            if envelope.stream in failed:
                continue
            if not future.done():
                future.cancel()
                result: object = TimeoutError("no acknowledgement")
            else:
                result = future.exception() or future.result()
            if isinstance(result, BaseException):
                failed.add(envelope.stream)  # the rest of that journal goes again, in order
                log.warning(
                    "nats: publish of %s#%d failed: %s", envelope.stream, envelope.seq, result
                )
                continue
            self.cursor.acked[envelope.stream] = envelope.seq
            acked += 1
        for journal in work:
            self._next[journal] = self.cursor.acked.get(journal, self._next.get(journal, 0))
        self._metrics.published.inc(acked)
        await asyncio.to_thread(self.cursor.save)
        if failed:
            raise ConnectionError(f"{len(failed)} journal(s) not acknowledged by the stream")

    def _read(self, work: dict[str, int], share: int) -> list[Envelope]:
        out: list[Envelope] = []
        for journal in work:
            out += self._ctx.store.read_stream(journal, self._next.get(journal, 0), share)
        return out
