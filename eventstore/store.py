"""Per-stream signed journals in one LMDB environment, written by one group-committing thread.

Layout (DESIGN.md "Journal and envelopes"):
  events: stream \\0 seq(8, big endian) → [position, payload, digest, signature]
  all:    position(8, big endian)        → stream \\0 seq   (the one total order)
  heads:  stream                         → [seq, digest]

Appends from coroutines and threads queue up; the writer takes everything queued, writes it in
one transaction with one fsync, then hands the new envelopes to the commit listeners (on the
event loop, in position order) and only then releases the callers. A caller that got an envelope
back therefore knows it is durable and already folded into every projection.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fcntl
import logging
import os
import queue
import struct
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial
from itertools import islice
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import lmdb
import msgspec
from nacl.signing import SigningKey, VerifyKey

from eventstore.envelope import (
    Envelope,
    Event,
    decode_each,
    decode_event,
    decode_events,
    digest_of,
    encode_event,
    signed_bytes,
    utc_now,
)
from eventstore.keychain import KeyChain, key_for_envelope
from eventstore.signing import SharedSigner, verify_batch

CommitListener = Callable[[list[Envelope]], None]
# Told when a commit listener raised: (the listener, the envelopes it was given, the exception).
ListenerFaultHook = Callable[[CommitListener, list[Envelope], Exception], None]
# origin → its key, or its KeyChain once it rotated keys (keychain.py), or None if unknown
KeyLookup = Callable[[str], VerifyKey | KeyChain | None]

_INITIAL_MAP_SIZE = 64 << 20
_MAX_DBS = 64  # the journal's three and the indexer's (projections/disk.py)
_CATCH_UP_CHUNK = 8192
_MAX_STREAM_BYTES = 200
_MIN_VERIFY_SHARE = 32  # foreign envelopes; a smaller share is verified by one thread
_SHARE_SIGNING_AT = 16  # appends in a batch; below, waking the helper costs more than it saves
_LONGEST_SIGNED = len(signed_bytes("x" * _MAX_STREAM_BYTES, 0, bytes(32)))
# bytes of the data file kept zero-filled past LMDB's last page: as many as the journal uses,
# within these bounds (a small journal does not get 8 MiB of zeros)
_ZEROS_AHEAD_MIN, _ZEROS_AHEAD_MAX = 1 << 20, 8 << 20
_record_encoder = msgspec.msgpack.Encoder()
_record_decoder = msgspec.msgpack.Decoder(tuple[int, bytes, bytes, bytes])
_SEQ = struct.Struct(">Q")  # the last 8 bytes of an events key
_records_decoder = msgspec.msgpack.Decoder(list[tuple[int, bytes, bytes, bytes]])
_head_decoder = msgspec.msgpack.Decoder(tuple[int, bytes])
_log = logging.getLogger("agent-node.eventstore")
WRITER_LOCK = "writer.lock"  # in the environment's folder, flock()ed by the writing process
_open_paths: set[str] = set()
_open_paths_lock = threading.Lock()


class Head(NamedTuple):
    seq: int
    digest: bytes

    @property
    def payload_hash(self) -> str:
        return "sha256:" + self.digest.hex()


class NewEvent(NamedTuple):
    stream: str
    type: str
    data: dict[str, Any]


class ForeignEnvelope(NamedTuple):
    """An envelope signed elsewhere, as pushed by a peer (payload and signature raw)."""

    stream: str
    seq: int
    payload: bytes
    signature: bytes


class ImportStatus(StrEnum):
    ACCEPTED = "accepted"
    MALFORMED = "malformed"
    UNKNOWN_ORIGIN = "unknown_origin"
    BAD_SIGNATURE = "bad_signature"
    GAP = "gap"
    DUPLICATE = "duplicate"
    EQUIVOCATION = "equivocation"
    BROKEN_CHAIN = "broken_chain"


class ImportResult(NamedTuple):
    status: ImportStatus
    envelope: Envelope | None = None
    detail: str = ""


ReadTxn = Callable[[], "contextlib.AbstractContextManager[lmdb.Transaction[bytes]]"]


class Indexer(Protocol):
    """Read models kept in the journal's environment and written in the journal's own write
    transactions, so they are exactly as far as the journal after any stop, `kill -9`
    included. The store knows nothing of what they hold (projections/disk.py does)."""

    def attach(self, env: lmdb.Environment, read: ReadTxn) -> None:
        """Open its databases (before any write) and keep `read` for its readers: the
        store's read transactions, which wait while the map grows."""

    def prepare(self, txn: lmdb.Transaction[bytes]) -> None:
        """In the writing process's first write transaction: a chance to empty what it must
        fold again (its position then drops, and `catch_up_index` refolds)."""

    def position(self, txn: lmdb.Transaction[bytes]) -> int:
        """The position of the newest envelope it folded."""

    def fold(self, txn: lmdb.Transaction[bytes], envelopes: Sequence[Envelope]) -> None:
        """Fold envelopes newer than its position, inside the write transaction; it must not
        raise (a fault in one read model is its own to report) or the batch fails."""

    def committed(self) -> None:
        """The transaction of the last `fold` committed: report what it found (a batch that
        had to be retried is folded again, so nothing is reported twice)."""


class StoreClosedError(RuntimeError):
    """The store no longer accepts writes (shutdown has begun)."""


class StoreAlreadyOpenError(RuntimeError):
    """A second store on the same environment would be a second writer."""


def validate_stream_name(stream: str) -> None:
    raw = stream.encode()
    if not raw or b"\0" in raw or len(raw) > _MAX_STREAM_BYTES:
        raise ValueError(f"invalid stream name {stream!r}")


class _StreamNames(dict[bytes, str]):
    """Decoded stream names by their key prefix: one `str` per journal, not one per row."""

    def __missing__(self, prefix: bytes) -> str:
        self[prefix] = name = prefix.decode()
        return name


def _allowed_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):  # Linux: what taskset or a cgroup allows
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _fill_signatures(slots: list[tuple[list[Envelope], int]], signatures: list[bytes]) -> None:
    for (staged, i), signature in zip(slots, signatures, strict=True):
        staged[i] = msgspec.structs.replace(staged[i], signature=signature)


def _event_key(stream: str, seq: int) -> bytes:
    return stream.encode() + b"\0" + seq.to_bytes(8, "big")


@dataclass(slots=True)
class _Request:
    """One caller's unit of work; all its events commit together or not at all."""

    future: asyncio.Future[Any] | concurrent.futures.Future[Any]
    appends: Sequence[NewEvent] = ()
    imports: Sequence[tuple[ForeignEnvelope, Event, bytes]] = ()
    result: list[Any] = field(default_factory=list)
    error: BaseException | None = None
    single: bool = False  # the caller wants the one envelope, not a list

    def finish(self) -> None:
        if self.future.done():  # the caller gave up waiting; the write stands
            return
        if self.error is not None:
            self.future.set_exception(self.error)
        else:
            self.future.set_result(self.result[0] if self.single else self.result)


_STOP = object()


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
    ) -> None:
        self.path = Path(path)
        self.origin = origin
        self.max_batch = max_batch
        self._real = os.path.realpath(self.path)
        with _open_paths_lock:
            if self._real in _open_paths:
                raise StoreAlreadyOpenError(f"{self.path} is already open in this process")
            _open_paths.add(self._real)
        self.path.mkdir(parents=True, exist_ok=True)
        self._env = lmdb.open(str(self.path), map_size=map_size, max_dbs=_MAX_DBS, sync=True)
        self._events = self._env.open_db(b"events")
        self._all = self._env.open_db(b"all")
        self._heads = self._env.open_db(b"heads")
        self.indexer = indexer
        if indexer is not None:
            indexer.attach(self._env, self._read)
        self._page_size = self._env.stat()["psize"]
        self._zeros_end = 0  # where the zeros written ahead of LMDB's last page end
        self._readers = 0
        self._resizing = False
        self._gate = threading.Condition()
        self._listeners: list[CommitListener] = []
        self.on_listener_fault: ListenerFaultHook = _log_listener_fault
        self._stream_names = _StreamNames()
        self._valid_streams: set[str] = set()
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._share_signing = True
        self._writer_lock: int | None = None
        self._signer = signer(signing_key)  # the C extension's, or PyNaCl's (signing.py)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._waiters: list[asyncio.Future[None]] = []
        with self._env.begin(db=self._all) as txn:
            cursor = txn.cursor()
            self._next_position = int.from_bytes(cursor.key(), "big") + 1 if cursor.last() else 1
        self._last_delivered = self._next_position - 1

    # ----------------------------------------------------------------- lifecycle
    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Bind the event loop that listeners run on and start the writer thread (after
        folding whatever the indexer lacks: `catch_up_index`, if the caller did not)."""
        self.catch_up_index()
        self._loop = loop or asyncio.get_running_loop()
        # a helper thread signs half of a large batch only where it has a core of its own: on
        # one allowed CPU it signs nothing sooner and costs two context switches a batch
        # (`taskset -c 0`: POST findings 4 % faster without it, `perf-guard`)
        self._share_signing = _allowed_cpus() > 1
        self._writer = threading.Thread(
            target=self._write_loop, name="eventstore-writer", daemon=True
        )
        self._writer.start()

    def _lock_writer(self) -> None:
        """One writing process per environment (readers need no lock): a second node on the
        same data dir, or an offline writer such as `key rotate` next to a running node, is
        refused instead of interleaving commits. The OS drops the lock when the process dies."""
        fd = os.open(self.path / WRITER_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise StoreAlreadyOpenError(
                f"{self.path} is being written by another process (a running node?)"
            ) from None
        self._writer_lock = fd

    def catch_up_index(
        self,
        progress: Callable[[Iterator[list[Envelope]], int], Iterable[Sequence[Envelope]]]
        | None = None,
    ) -> int:
        """Fold what the indexer lacks (a data dir from before it, or read models whose code
        changed and were reset) in write transactions of their own; before `start` only.
        `progress(chunks, total)` may wrap the chunks (a progress bar). Returns the count."""
        if self._writer_lock is None:
            self._lock_writer()
        indexer = self.indexer
        if indexer is None or self._writer is not None:
            return 0
        self._write_growing(indexer.prepare)
        with self._read() as txn:
            done = indexer.position(txn)
        behind = self._next_position - 1 - done
        if not behind:
            return 0
        stored = self.iter_chunks(done, _CATCH_UP_CHUNK)
        chunks: Iterable[Sequence[Envelope]] = (
            stored if progress is None else progress(stored, behind)
        )
        for chunk in chunks:
            self._write_growing(partial(indexer.fold, envelopes=chunk))
            indexer.committed()
        return behind

    def _write_growing(self, write: Callable[[lmdb.Transaction[bytes]], None]) -> None:
        """One write transaction, retried with a larger map while the map is full."""
        while True:
            try:
                with self._env.begin(write=True) as txn:
                    write(txn)
                return
            except lmdb.MapFullError:
                self._grow()

    async def close(self) -> None:
        """Refuse new writes, commit everything already queued, then close the environment."""
        if self._closed:
            return
        self._closed = True
        if self._writer is not None:
            self._queue.put(_STOP)
            await asyncio.get_running_loop().run_in_executor(None, self._writer.join)
            await asyncio.sleep(0)  # let the last deliveries run
        self._close_env()

    def close_sync(self) -> None:
        """For offline tools that never started the writer."""
        self._closed = True
        if self._writer is not None:
            self._queue.put(_STOP)
            self._writer.join()
        self._close_env()

    def _close_env(self) -> None:
        self._env.close()
        self._signer.close()
        if self._writer_lock is not None:
            os.close(self._writer_lock)  # releases the flock
            self._writer_lock = None
        with _open_paths_lock:
            _open_paths.discard(self._real)

    def add_commit_listener(self, listener: CommitListener) -> None:
        """`listener(envelopes)` runs on the loop after each commit, before callers resume.

        A listener that raises is reported to `on_listener_fault`; the other listeners still
        run and the callers still resume (their writes are durable either way)."""
        self._listeners.append(listener)

    @property
    def last_position(self) -> int:
        """Position of the newest envelope already handed to the listeners."""
        return self._last_delivered

    # ----------------------------------------------------------------- writes
    def append(self, stream: str, type: str, data: dict[str, Any]) -> Awaitable[Envelope]:
        """Append one event; await the result (a future, not a coroutine: appends are hot)."""
        events = (NewEvent(stream, type, data),)
        self._check_streams(events)
        future: asyncio.Future[Envelope] = asyncio.get_running_loop().create_future()
        self._submit(_Request(future, appends=events, single=True))
        return future

    async def append_many(self, events: Sequence[NewEvent]) -> list[Envelope]:
        """Append atomically: all events commit in one transaction or none does."""
        self._check_streams(events)
        future: asyncio.Future[list[Envelope]] = asyncio.get_running_loop().create_future()
        self._submit(_Request(future, appends=events))
        return await future

    def append_blocking(
        self, stream: str, type: str, data: dict[str, Any], timeout: float | None = None
    ) -> Envelope:
        """For worker threads (never the loop): returns once durable and folded."""
        events = (NewEvent(stream, type, data),)
        self._check_streams(events)
        future: concurrent.futures.Future[Envelope] = concurrent.futures.Future()
        self._submit(_Request(future, appends=events, single=True))
        return future.result(timeout)

    def _check_streams(self, events: Sequence[NewEvent]) -> None:
        for event in events:
            if event.stream not in self._valid_streams:
                validate_stream_name(event.stream)
                self._valid_streams.add(event.stream)

    async def import_envelopes(
        self, items: Sequence[ForeignEnvelope], key_for_origin: KeyLookup
    ) -> list[ImportResult]:
        """Verify foreign envelopes and store those that extend their journal by exactly one.

        Hashes and signatures are checked off the loop; seq, head and chain inside the write
        transaction. Results come back in the order of `items`.
        """
        loop = asyncio.get_running_loop()
        # one share per allowed CPU, verified in parallel (verify_batch holds no GIL)
        items = list(items)
        shares = max(1, min(_allowed_cpus(), len(items) // _MIN_VERIFY_SHARE))
        size = max(1, -(-len(items) // shares))
        checked = [
            result
            for share in await asyncio.gather(
                *(
                    loop.run_in_executor(None, _precheck, items[i : i + size], key_for_origin)
                    for i in range(0, len(items), size)
                )
            )
            for result in share
        ]
        results: list[ImportResult | None] = [
            r if isinstance(r, ImportResult) else None for r in checked
        ]
        verified = [r for r in checked if not isinstance(r, ImportResult)]
        if verified:
            future: asyncio.Future[list[ImportResult]] = loop.create_future()
            self._submit(_Request(future, imports=verified))
            stored = iter(await future)
            results = [r if r is not None else next(stored) for r in results]
        return [r for r in results if r is not None]

    def _submit(self, request: _Request) -> None:
        if self._closed or self._writer is None:
            raise StoreClosedError("the event store is closed")
        self._queue.put(request)

    # ----------------------------------------------------------------- writer thread
    def _write_loop(self) -> None:
        stopping = False
        while not stopping:
            batch: list[_Request] = []
            item = self._queue.get()
            while True:
                if item is _STOP:
                    stopping = True
                else:
                    batch.append(item)
                if len(batch) >= self.max_batch:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            if batch:
                self._commit(batch)

    def _commit(self, batch: list[_Request]) -> None:
        while True:
            try:
                envelopes = self._write_batch(batch)
                if self.indexer is not None and envelopes:
                    self.indexer.committed()
                break
            except lmdb.MapFullError:
                self._grow()
            except Exception as exc:  # a storage fault: fail the whole batch, lose nothing acked
                for request in batch:
                    request.error = exc
                envelopes = []
                break
        self._deliver(batch, envelopes)
        self._keep_zeros_ahead()

    def _keep_zeros_ahead(self) -> None:
        """Zero-fill the data file ahead of LMDB's last page, up to a few MiB at a time.

        A commit that grows the file makes its fdatasync flush the new size as well (a journal
        commit on ext4): about a fifth of a 64-append commit here. With written zeros ahead,
        commits write into blocks the file already has. (`fallocate` does not help: its
        unwritten extents cost the same on first write.) Only this thread writes the file, and
        only past the last page, so LMDB never finds zeros where it wrote a page.
        """
        info = self._env.info()
        used = (info["last_pgno"] + 1) * self._page_size
        ahead = min(max(used, _ZEROS_AHEAD_MIN), _ZEROS_AHEAD_MAX)
        if self._zeros_end - used >= ahead // 2:
            return
        target = min(used + ahead, info["map_size"])
        if target <= self._zeros_end:  # the map's end: nothing more to write before it grows
            return
        try:
            with open(self.path / "data.mdb", "r+b") as data:
                end = data.seek(0, os.SEEK_END)
                if end < target:
                    data.write(bytes(target - end))
                    os.fdatasync(data.fileno())
                self._zeros_end = max(end, target)
        except OSError:  # a full disk: commits still work, they only pay for growing the file
            self._zeros_end = target

    def _write_batch(self, batch: list[_Request]) -> list[Envelope]:
        position = self._next_position
        ts = utc_now()  # one commit, one instant
        with self._env.begin(write=True) as txn:
            heads: dict[str, Head | None] = {}

            def head_of(stream: str) -> Head | None:
                if stream not in heads:
                    raw = txn.get(stream.encode(), db=self._heads)
                    heads[stream] = Head(*_head_decoder.decode(raw)) if raw else None
                return heads[stream]

            plan: list[tuple[_Request, list[Envelope]]] = []
            imported: dict[bytes, bytes] = {}  # event key → digest of imports staged in this batch
            signer = self._signer
            # each signed message goes to a helper thread (on another core) as soon as it is
            # staged; the messages it has not claimed when staging ends are signed here
            appends = sum(len(request.appends) for request in batch)
            helped = self._share_signing and appends >= _SHARE_SIGNING_AT
            signer.begin(appends, _LONGEST_SIGNED, helped=helped)
            slots: list[tuple[list[Envelope], int]] = []
            for request in batch:
                request.result = []
                request.error = None
                try:
                    staged = (
                        self._stage_appends(request, head_of, ts, position)
                        if request.appends
                        else self._stage_imports(request, head_of, txn, position, imported)
                    )
                except Exception as exc:
                    request.error = exc
                    continue
                for envelope in staged:
                    heads[envelope.stream] = Head(envelope.seq, envelope.digest)
                position += len(staged)
                plan.append((request, staged))
                if request.appends:
                    for i, e in enumerate(staged):
                        signer.add(signed_bytes(e.stream, e.seq, e.digest))
                        slots.append((staged, i))
            if self.indexer is not None and plan:
                # read models need no signature: folding them now gives the helper thread
                # that long to sign more of this batch, instead of the writer after it
                self.indexer.fold(txn, [e for _, staged in plan for e in staged])
            _fill_signatures(slots, signer.finish())
            envelopes: list[Envelope] = []
            for request, staged in plan:
                envelopes.extend(staged)
                if request.appends:
                    request.result = staged
            rows = [
                (
                    _event_key(e.stream, e.seq),
                    _record_encoder.encode((e.position, e.payload, e.digest, e.signature)),
                )
                for e in envelopes
            ]
            _, added = txn.cursor(db=self._events).putmulti(rows, overwrite=False)
            if added != len(rows):
                raise RuntimeError("an envelope of this batch is already stored")
            txn.cursor(db=self._all).putmulti(
                (
                    (e.position.to_bytes(8, "big"), key)
                    for e, (key, _) in zip(envelopes, rows, strict=True)
                ),
                append=True,
            )
            for stream, head in heads.items():
                if head is not None:
                    txn.put(stream.encode(), _record_encoder.encode(head), db=self._heads)
        self._next_position = position
        return envelopes

    def _stage_appends(
        self,
        request: _Request,
        head_of: Callable[[str], Head | None],
        ts: str,
        position: int,
    ) -> list[Envelope]:
        """Build the request's envelopes (signed later, together); all or none of them."""
        staged: list[Envelope] = []
        overlay: dict[str, Head] = {}
        for stream, type_, data in request.appends:
            head = overlay.get(stream) or head_of(stream)
            seq = head.seq + 1 if head else 1
            prev = head.payload_hash if head else ""
            event = Event(type=type_, ts=ts, origin=self.origin, prev=prev, data=data)
            payload = encode_event(event)
            digest = digest_of(payload)
            staged.append(Envelope(stream, seq, payload, digest, b"", event, position))
            position += 1
            overlay[stream] = Head(seq, digest)
        return staged

    def _stage_imports(
        self,
        request: _Request,
        head_of: Callable[[str], Head | None],
        txn: lmdb.Transaction[bytes],
        position: int,
        imported: dict[bytes, bytes],
    ) -> list[Envelope]:
        """Import what extends its journal by one; `imported` holds what earlier requests of
        the batch staged (not yet in `txn`), so a second copy is a duplicate, not a fork."""
        staged: list[Envelope] = []
        overlay: dict[str, Head] = {}
        for foreign, event, digest in request.imports:
            head = overlay.get(foreign.stream) or head_of(foreign.stream)
            head_seq = head.seq if head else 0
            if foreign.seq <= head_seq:
                key = _event_key(foreign.stream, foreign.seq)
                held = imported.get(key)
                if held is None:
                    stored = txn.get(key, db=self._events)
                    held = _record_decoder.decode(stored)[2] if stored is not None else None
                same = held == digest
                status = ImportStatus.DUPLICATE if same else ImportStatus.EQUIVOCATION
                request.result.append(ImportResult(status, detail=f"head is {head_seq}"))
                continue
            if foreign.seq != head_seq + 1:
                request.result.append(
                    ImportResult(ImportStatus.GAP, detail=f"expected seq {head_seq + 1}")
                )
                continue
            expected_prev = head.payload_hash if head else ""
            if event.prev != expected_prev:
                request.result.append(
                    ImportResult(ImportStatus.BROKEN_CHAIN, detail="prev does not match head")
                )
                continue
            envelope = Envelope(
                foreign.stream,
                foreign.seq,
                foreign.payload,
                digest,
                foreign.signature,
                event,
                position,
            )
            position += 1
            staged.append(envelope)
            imported[_event_key(foreign.stream, foreign.seq)] = digest
            overlay[foreign.stream] = Head(foreign.seq, digest)
            request.result.append(ImportResult(ImportStatus.ACCEPTED, envelope))
        return staged

    def _grow(self) -> None:
        """Double map_size; LMDB requires that no transaction is open in this process."""
        with self._gate:
            self._resizing = True
            while self._readers:
                self._gate.wait()
            try:
                self._env.set_mapsize(self._env.info()["map_size"] * 2)
            finally:
                self._resizing = False
                self._gate.notify_all()

    def _deliver(self, batch: list[_Request], envelopes: list[Envelope]) -> None:
        def run() -> None:
            try:
                if envelopes:
                    for listener in self._listeners:
                        try:
                            listener(envelopes)
                        except Exception as exc:
                            self._listener_fault(listener, envelopes, exc)
                    self._last_delivered = envelopes[-1].position
                    waiters, self._waiters = self._waiters, []
                    for waiter in waiters:
                        if not waiter.done():
                            waiter.set_result(None)
            finally:  # whatever a listener did, no caller is left waiting
                for request in batch:
                    request.finish()

        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(run)
                return
            except RuntimeError:
                pass
        run()

    def _listener_fault(
        self, listener: CommitListener, envelopes: list[Envelope], exc: Exception
    ) -> None:
        try:
            self.on_listener_fault(listener, envelopes, exc)
        except Exception:  # the reporter itself failed: the log line is all that is left
            _log_listener_fault(listener, envelopes, exc)

    async def wait_beyond(self, position: int) -> None:
        """Return once an envelope after `position` has been committed and delivered."""
        while self._last_delivered <= position:
            future = asyncio.get_running_loop().create_future()
            self._waiters.append(future)
            await future

    # ----------------------------------------------------------------- reads
    @contextmanager
    def _read(self) -> Iterator[lmdb.Transaction[bytes]]:
        with self._gate:
            while self._resizing:
                self._gate.wait()
            self._readers += 1
        try:
            with self._env.begin(buffers=False) as txn:
                yield txn
        finally:
            with self._gate:
                self._readers -= 1
                if not self._readers:
                    self._gate.notify_all()

    def _load(self, stream: str, seq: int, raw: bytes) -> Envelope:
        position, payload, digest, signature = _record_decoder.decode(raw)
        return Envelope(stream, seq, payload, digest, signature, decode_event(payload), position)

    def head(self, stream: str) -> Head | None:
        with self._read() as txn:
            raw = txn.get(stream.encode(), db=self._heads)
        return Head(*_head_decoder.decode(raw)) if raw else None

    def heads(self) -> dict[str, Head]:
        with self._read() as txn:
            return {
                key.decode(): Head(*_head_decoder.decode(value))
                for key, value in txn.cursor(db=self._heads)
            }

    def get(self, stream: str, seq: int) -> Envelope | None:
        with self._read() as txn:
            raw = txn.get(_event_key(stream, seq), db=self._events)
            return self._load(stream, seq, raw) if raw else None

    def at(self, position: int) -> Envelope | None:
        """The envelope at a global position."""
        found = self.read_all(position - 1, 1)
        return found[0] if found and found[0].position == position else None

    def read_stream(self, stream: str, after_seq: int = 0, limit: int = 100) -> list[Envelope]:
        """Envelopes of one journal with seq > after_seq, oldest first."""
        out: list[Envelope] = []
        prefix = stream.encode() + b"\0"
        with self._read() as txn:
            cursor = txn.cursor(db=self._events)
            if not cursor.set_range(_event_key(stream, after_seq + 1)):
                return out
            for key, raw in cursor:
                if len(out) >= limit or not key.startswith(prefix) or len(key) != len(prefix) + 8:
                    break
                out.append(self._load(stream, int.from_bytes(key[-8:], "big"), raw))
        return out

    def read_all(self, after_position: int = 0, limit: int = 1000) -> list[Envelope]:
        """Envelopes of every journal with position > after_position, in the total order."""
        with self._read() as txn:
            cursor = txn.cursor(db=self._all)
            if not cursor.set_range((after_position + 1).to_bytes(8, "big")):
                return []
            keys = list(islice(cursor.iternext(keys=False, values=True), limit))
            # one C call for all the gets, one for all the records, one for all the payloads, one
            # comprehension for all the rows: a replay is mostly per-row overhead
            rows = txn.cursor(db=self._events).getmulti(keys)
        records = _decode_records([raw for _, raw in rows])
        events = decode_events([record[1] for record in records])
        names, seq_at_end = self._stream_names, _SEQ.unpack_from
        return [
            Envelope(names[key[:-9]], seq_at_end(key, -8)[0], r[1], r[2], r[3], event, r[0])
            for (key, _), r, event in zip(rows, records, events, strict=True)
        ]

    def iter_chunks(self, after_position: int = 0, size: int = 256) -> Iterator[list[Envelope]]:
        """Every envelope after a position, in chunks of `size`: no read transaction lives long,
        short-lived chunks keep a full replay twice as fast as one big list, and a fold that
        loops over each chunk saves a generator step per envelope."""
        while True:
            envelopes = self.read_all(after_position, size)
            if envelopes:
                yield envelopes
            if len(envelopes) < size:
                return
            after_position = envelopes[-1].position

    def iter_stream_records(self, stream: str, chunk: int = 5000) -> Iterator[tuple[int, bytes]]:
        """(seq, stored record bytes) of one journal, undecoded: for audits of damaged data."""
        prefix = stream.encode() + b"\0"
        after = 0
        while True:
            rows: list[tuple[int, bytes]] = []
            with self._read() as txn:
                cursor = txn.cursor(db=self._events)
                if cursor.set_range(_event_key(stream, after + 1)):
                    for key, raw in cursor:
                        if len(rows) >= chunk or not key.startswith(prefix):
                            break
                        if len(key) == len(prefix) + 8:
                            rows.append((int.from_bytes(key[-8:], "big"), raw))
            yield from rows
            if len(rows) < chunk:
                return
            after = rows[-1][0]

    def iter_stream(self, stream: str, chunk: int = 5000) -> Iterator[Envelope]:
        after = 0
        while True:
            envelopes = self.read_stream(stream, after, chunk)
            yield from envelopes
            if len(envelopes) < chunk:
                return
            after = envelopes[-1].seq


def _log_listener_fault(
    listener: CommitListener, envelopes: list[Envelope], exc: Exception
) -> None:
    name = getattr(listener, "__qualname__", repr(listener))
    first = envelopes[0] if envelopes else None
    where = f"{first.stream}#{first.seq}" if first else "?"
    _log.error("commit listener %s raised on a batch from %s", name, where, exc_info=exc)


def decode_record(raw: bytes) -> tuple[int, bytes, bytes, bytes]:
    """A stored record → (position, payload, digest, signature)."""
    return _record_decoder.decode(raw)


def _decode_records(raws: list[bytes]) -> list[tuple[int, bytes, bytes, bytes]]:
    return decode_each(raws, _records_decoder, decode_record)


def _precheck(
    items: list[ForeignEnvelope], key_for_origin: KeyLookup
) -> list[ImportResult | tuple[ForeignEnvelope, Event, bytes]]:
    """Decode, hash and verify each foreign envelope: everything that needs no head. The
    signatures of a share are checked in one call (`verify_batch`: C, no GIL)."""
    out: list[ImportResult | tuple[ForeignEnvelope, Event, bytes]] = []
    checks: list[tuple[bytes, bytes, bytes]] = []
    pending: list[int] = []  # the index in `out` of each check
    for item in items:
        try:
            validate_stream_name(item.stream)
            if item.seq < 1:
                raise ValueError("seq must be at least 1")
            event = decode_event(item.payload)
        except (ValueError, msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
            out.append(ImportResult(ImportStatus.MALFORMED, detail=str(exc)))
            continue
        key = key_for_envelope(key_for_origin(event.origin), item.stream, item.seq)
        if key is None:
            out.append(ImportResult(ImportStatus.UNKNOWN_ORIGIN, detail=f"origin {event.origin!r}"))
            continue
        digest = digest_of(item.payload)
        checks.append((bytes(key), signed_bytes(item.stream, item.seq, digest), item.signature))
        pending.append(len(out))
        out.append((item, event, digest))
    for index, verified in zip(pending, verify_batch(checks), strict=True):
        if not verified:
            out[index] = ImportResult(
                ImportStatus.BAD_SIGNATURE, detail="signature does not verify"
            )
    return out
