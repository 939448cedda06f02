"""The event store: per-stream signed journals in one LMDB environment, one writer thread.

`EventStore` is the facade callers use; each job lives in its own module:
  layout.py       the on-disk format (keys, records, heads, stream names)
  writer.py       the group-committing writer thread and its transaction
  delivery.py     commit listeners on the event loop, then the callers' release
  reads.py        reads by stream, seq and position; chunked scans and their decoding
  indexing.py     the `Indexer` protocol (read models in the writer's transaction), catch-up
  imports.py      foreign envelopes: verification, then gap/duplicate/equivocation/chain checks
  growth.py       map growth and the reader gate it needs
  zeros.py        zeros kept written ahead of LMDB's last page
  writer_lock.py  one writer per environment, in this process and across processes

A caller that got an envelope back knows it is durable and already folded into every
projection (writer.py, delivery.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import os
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import lmdb
from nacl.signing import SigningKey

from eventstore.delivery import CommitListener, Delivery, ListenerFaultHook, RewindListener
from eventstore.envelope import Envelope
from eventstore.growth import MapGate
from eventstore.imports import (
    ForeignEnvelope,
    ImportResult,
    ImportStatus,
    KeyLookup,
    Verified,
    allowed_cpus,
    merge,
    verify_foreign,
)
from eventstore.indexing import Indexer, Progress, ReadTxn, catch_up
from eventstore.layout import Head, decode_record, open_dbs, validate_stream_name
from eventstore.reads import JournalReader
from eventstore.signing import SharedSigner
from eventstore.writer import Fenced, NewEvent, Request, Writer
from eventstore.writer_lock import (
    WRITER_LOCK,
    StoreAlreadyOpenError,
    WriterLock,
    claim_path,
    release_path,
)
from eventstore.zeros import ZerosAhead

__all__ = [
    "WRITER_LOCK",
    "CommitListener",
    "EventStore",
    "Fenced",
    "ForeignEnvelope",
    "Head",
    "ImportResult",
    "ImportStatus",
    "Indexer",
    "KeyLookup",
    "ListenerFaultHook",
    "NewEvent",
    "ReadTxn",
    "RewindListener",
    "StoreAlreadyOpenError",
    "StoreClosedError",
    "decode_record",
    "validate_stream_name",
]

_INITIAL_MAP_SIZE = 64 << 20
_MAX_DBS = 64  # the journal's three and the indexer's (projections/disk.py)


class StoreClosedError(RuntimeError):
    """The store no longer accepts writes (shutdown has begun)."""


class EventStore:
    """The only writer of its LMDB environment; readers may use it from any thread."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        signing_key: SigningKey,
        origin: str,
        *,
        map_size: int = _INITIAL_MAP_SIZE,
        max_batch: int = 1000,
        signer: Callable[[SigningKey], SharedSigner] = SharedSigner,
        indexer: Indexer | None = None,
        mode: int = 0o600,
    ) -> None:
        self.path = Path(path)
        self.origin = origin
        self._claim = claim_path(self.path)
        # `mode`: of LMDB's files; the folder gets the same plus search (x) for each reader
        self.path.mkdir(parents=True, exist_ok=True, mode=mode | (mode & 0o444) >> 2)
        self._env = lmdb.open(
            str(self.path), map_size=map_size, max_dbs=_MAX_DBS, sync=True, mode=mode
        )
        dbs = open_dbs(self._env)
        self._gate = MapGate(self._env)
        self.indexer = indexer
        if indexer is not None:
            indexer.attach(self._env, self._gate.read)
        self._reader = JournalReader(self._gate, dbs)
        stored = self._reader.last_stored_position()
        self._delivery = Delivery(last_delivered=stored)
        self._valid_streams: set[str] = set()
        self._lock = WriterLock(self.path)
        self._signer = signer(signing_key)  # the C extension's, or PyNaCl's (signing.py)
        self._writer = Writer(
            self._env,
            dbs,
            self._gate,
            ZerosAhead(self._env, self.path / "data.mdb"),
            self._signer,
            origin,
            indexer,
            self._delivery.deliver,
            next_position=stored + 1,
            max_batch=max_batch,
        )
        self._writer.deliver_rewind = self._delivery.deliver_rewind
        self._queue = self._writer.queue
        self._closed = False
        self._accepting = False  # between start and close: checked on every append

    # ----------------------------------------------------------------- lifecycle
    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Bind the event loop that listeners run on and start the writer thread (after
        folding whatever the indexer lacks: `catch_up_index`, if the caller did not)."""
        self.catch_up_index()
        self._delivery.loop = loop or asyncio.get_running_loop()
        # a helper thread signs half of a large batch only where it has a core of its own: on
        # one allowed CPU it signs nothing sooner and costs two context switches a batch
        # (`taskset -c 0`: POST findings 4 % faster without it, `perf-guard`)
        self._writer.start(share_signing=allowed_cpus() > 1)
        self._accepting = not self._closed

    def catch_up_index(self, progress: Progress | None = None) -> int:
        """Fold what the indexer lacks (a data dir from before it, or read models whose code
        changed and were reset) in write transactions of their own; before `start` only.
        `progress(chunks, total)` may wrap the chunks (a progress bar). Returns the count.
        Takes the writer lock first: this process is the environment's writer from now on."""
        self._lock.acquire()
        if self.indexer is None or self._writer.started:
            return 0
        last = self._writer.next_position - 1
        return catch_up(self.indexer, self._gate, self._reader, last, progress)

    async def close(self) -> None:
        """Refuse new writes, commit everything already queued, then close the environment."""
        if self._closed:
            return
        self._closed = True
        self._accepting = False
        if self._writer.started:
            await asyncio.get_running_loop().run_in_executor(None, self._writer.stop)
            await asyncio.sleep(0)  # let the last deliveries run
        self._close_env()

    def close_sync(self) -> None:
        """For offline tools that never started the writer."""
        self._closed = True
        self._accepting = False
        self._writer.stop()
        self._close_env()

    def _close_env(self) -> None:
        self._env.close()
        self._signer.close()
        self._lock.release()
        release_path(self._claim)

    def add_commit_listener(self, listener: CommitListener) -> None:
        """`listener(envelopes)` runs on the loop after each commit, before callers resume.

        A listener that raises is reported to `on_listener_fault`; the other listeners still
        run and the callers still resume (their writes are durable either way)."""
        self._delivery.listeners.append(listener)

    def add_rewind_listener(self, listener: RewindListener) -> None:
        """`listener(stream, removed)` runs on the loop after a rewind commits, in order with
        the commit listeners' batches, before the rewinding caller resumes."""
        self._delivery.rewind_listeners.append(listener)

    @property
    def on_listener_fault(self) -> ListenerFaultHook:
        return self._delivery.on_listener_fault

    @on_listener_fault.setter
    def on_listener_fault(self, hook: ListenerFaultHook) -> None:
        self._delivery.on_listener_fault = hook

    @property
    def last_position(self) -> int:
        """Position of the newest envelope already handed to the listeners."""
        return self._delivery.last_delivered

    @property
    def max_batch(self) -> int:
        return self._writer.max_batch

    @property
    def map_size(self) -> int:
        """The LMDB map's current size in bytes (it doubles when full)."""
        return self._gate.map_size

    async def wait_beyond(self, position: int) -> None:
        """Return once an envelope after `position` has been committed and delivered."""
        await self._delivery.wait_beyond(position)

    # ----------------------------------------------------------------- writes
    def append(self, stream: str, type: str, data: dict[str, Any]) -> Awaitable[Envelope]:
        """Append one event; await the result (a future, not a coroutine: appends are hot)."""
        events = (NewEvent(stream, type, data),)
        self._check_streams(events)
        future: asyncio.Future[Envelope] = asyncio.get_running_loop().create_future()
        self._submit(Request(future, appends=events, single=True))
        return future

    def append_sealing(self, stream: str, type: str, data: dict[str, Any]) -> Awaitable[Envelope]:
        """Append one event as the last this node writes to `stream`: the writer disowns the
        stream (as `disown` does) as soon as this event is staged, so no append queued after
        it can follow it, whatever its caller checked before. `own` lifts it."""
        events = (NewEvent(stream, type, data),)
        self._check_streams(events)
        future: asyncio.Future[Envelope] = asyncio.get_running_loop().create_future()
        self._submit(Request(future, appends=events, single=True, seal=True))
        return future

    async def append_many(self, events: Sequence[NewEvent]) -> list[Envelope]:
        """Append atomically: all events commit in one transaction or none does."""
        self._check_streams(events)
        future: asyncio.Future[list[Envelope]] = asyncio.get_running_loop().create_future()
        self._submit(Request(future, appends=events))
        return await future

    def append_blocking(
        self, stream: str, type: str, data: dict[str, Any], timeout: float | None = None
    ) -> Envelope:
        """For worker threads (never the loop): returns once durable and folded."""
        events = (NewEvent(stream, type, data),)
        self._check_streams(events)
        future: concurrent.futures.Future[Envelope] = concurrent.futures.Future()
        self._submit(Request(future, appends=events, single=True))
        return future.result(timeout)

    def append_many_blocking(
        self, events: Sequence[NewEvent], timeout: float | None = None
    ) -> list[Envelope]:
        """`append_many` for worker threads: all or none, returned once durable and folded."""
        self._check_streams(events)
        future: concurrent.futures.Future[list[Envelope]] = concurrent.futures.Future()
        self._submit(Request(future, appends=events))
        return future.result(timeout)

    # ----------------------------------------------------------------- fences (writer.py)
    def fence(self, stream: str, deadline: float | None) -> None:
        """Let this store append to `stream` only until `deadline` (`time.monotonic()`
        seconds); later appends fail with `Fenced`, including ones queued before it. None
        lifts the fence; a new deadline replaces the old. A disowned stream stays refused
        whatever the deadline. Imports are never fenced."""
        if stream in self._writer.disowned:
            return
        if deadline is None:
            self._writer.fences.pop(stream, None)
        else:
            self._writer.fences[stream] = deadline

    def block(self, stream: str) -> None:
        """Refuse every append to `stream` until `fence(stream, ...)` says otherwise."""
        self.fence(stream, -math.inf)

    def disown(self, stream: str) -> None:
        """`stream` is written elsewhere now: refuse every append to it (queued ones too)
        until `own(stream)`; no `fence` lifts it. Why a caller disowns a stream is its own
        business (a journal another node writes, for the placement layer)."""
        self._writer.disowned.add(stream)
        self._writer.fences[stream] = -math.inf

    def own(self, stream: str) -> None:
        """Undo `disown`: the stream stays blocked until `fence` gives it a deadline."""
        self._writer.disowned.discard(stream)

    def disowned(self, stream: str) -> bool:
        return stream in self._writer.disowned

    def fence_of(self, stream: str) -> float | None:
        """The deadline of the stream's fence (-inf when blocked), or None when unfenced."""
        return self._writer.fences.get(stream)

    def _check_streams(self, events: Sequence[NewEvent]) -> None:
        for event in events:
            if event.stream not in self._valid_streams:
                validate_stream_name(event.stream)
                self._valid_streams.add(event.stream)

    def rewind(self, stream: str, keep_through: int) -> Awaitable[list[Envelope]]:
        """Remove `stream`'s envelopes after seq `keep_through` (its head becomes that seq)
        and return them, oldest first; atomically, in its place in the writer's queue (queued
        now, not when awaited; rewind.py). The indexer is refolded in the same transaction;
        in-memory read models learn it from the rewind listeners. Never for a journal this
        node may still write (fence it first)."""
        validate_stream_name(stream)
        if keep_through < 0:
            raise ValueError("keep_through must be 0 or more")
        future: asyncio.Future[list[Envelope]] = asyncio.get_running_loop().create_future()
        self._writer.rewinds_pending += 1
        try:
            self._submit(Request(future, rewind=(stream, keep_through)))
        except BaseException:
            self._writer.rewinds_pending -= 1
            raise
        return future

    def rewound_at(self) -> int:
        """The newest position stored when a journal was last rewound (0: never)."""
        return self._reader.rewound_at()

    async def barrier(self) -> None:
        """Return once everything queued before this call is committed and delivered."""
        future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self._submit(Request(future))
        await future

    async def import_envelopes(
        self, items: Sequence[ForeignEnvelope], key_for_origin: KeyLookup
    ) -> list[ImportResult]:
        """Verify foreign envelopes and store those that extend their journal by exactly one.

        Hashes and signatures are checked off the loop; seq, head, chain and writer inside the
        write transaction (imports.py). Results come back in the order of `items`.
        """
        checked = await verify_foreign(items, key_for_origin)
        return merge(checked, await self.queue_imports(checked))

    def queue_imports(
        self, checked: Sequence[ImportResult | Verified]
    ) -> asyncio.Future[list[ImportResult]]:
        """Queue the `Verified` of `checked` for the writer now, behind every request queued
        before (so imports queued one after the other commit in that order); the future gets
        the writer's verdict on each `Verified`, in order (`merge` puts them back in place)."""
        future: asyncio.Future[list[ImportResult]] = asyncio.get_running_loop().create_future()
        verified = [r for r in checked if not isinstance(r, ImportResult)]
        if verified:
            self._submit(Request(future, imports=verified))
        else:
            future.set_result([])
        return future

    def _submit(self, request: Request) -> None:
        if not self._accepting:
            raise StoreClosedError("the event store is closed")
        self._queue.put(request)

    # ----------------------------------------------------------------- reads (reads.py)
    def head(self, stream: str) -> Head | None:
        return self._reader.head(stream)

    def heads(self) -> dict[str, Head]:
        return self._reader.heads()

    def get(self, stream: str, seq: int) -> Envelope | None:
        return self._reader.get(stream, seq)

    def at(self, position: int) -> Envelope | None:
        """The envelope at a global position."""
        return self._reader.at(position)

    def read_stream(self, stream: str, after_seq: int = 0, limit: int = 100) -> list[Envelope]:
        """Envelopes of one journal with seq > after_seq, oldest first."""
        return self._reader.read_stream(stream, after_seq, limit)

    def read_all(self, after_position: int = 0, limit: int = 1000) -> list[Envelope]:
        """Envelopes of every journal with position > after_position, in the total order."""
        return self._reader.read_all(after_position, limit)

    def read_all_bounded(self, after_position: int, limit: int, max_bytes: int) -> list[Envelope]:
        """`read_all` stopping at `max_bytes` of records too (at least one when any is there)."""
        return self._reader.read_all_bounded(after_position, limit, max_bytes)

    def read_stream_bounded(
        self, stream: str, after_seq: int, limit: int, max_bytes: int
    ) -> list[Envelope]:
        """`read_stream` stopping at `max_bytes` of records too (at least one when any is)."""
        return self._reader.read_stream_bounded(stream, after_seq, limit, max_bytes)

    def iter_chunks(self, after_position: int = 0, size: int = 128) -> Iterator[list[Envelope]]:
        """Every envelope after a position, in chunks of `size` (each its own read)."""
        return self._reader.iter_chunks(after_position, size)

    def iter_stream_records(self, stream: str, chunk: int = 5000) -> Iterator[tuple[int, bytes]]:
        """(seq, stored record bytes) of one journal, undecoded: for audits of damaged data."""
        return self._reader.iter_stream_records(stream, chunk)

    def stream_snapshot(
        self, stream: str
    ) -> AbstractContextManager[tuple[Head | None, Iterator[tuple[int, bytes]]]]:
        """A journal's head and stored records read in one transaction (JournalReader)."""
        return self._reader.stream_snapshot(stream)

    def iter_stream(self, stream: str, chunk: int = 5000) -> Iterator[Envelope]:
        return self._reader.iter_stream(stream, chunk)
